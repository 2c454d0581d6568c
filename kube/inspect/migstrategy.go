package inspect

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"

	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/submit"
	"github.com/allot-dev/allot/mig"
)

// FixedOffer is where a fixed MIG layout's instances of one profile are, by how the
// device plugin gives them: Mixed names the nodes of its mixed strategy
// (nvidia.com/mig-<profile>), Single those of its single strategy (nvidia.com/gpu), and
// Products their GPU Feature Discovery product labels ("<model>-MIG-<profile>"), which a
// pod asking them pins.
type FixedOffer struct {
	Mixed, Single, Products []string
}

// FixedMIGOffer finds the nodes a request may run on (its pool, its models) whose fixed
// layouts have instances of its profile, for allot submit --mig to choose how to ask them.
func FixedMIGOffer(nodes []Node, r submit.Request) FixedOffer {
	var out FixedOffer
	for _, n := range nodes {
		if n.Pool != r.Pool || n.Accelerator != "" || !modelAllowed(n, r.Models) {
			continue
		}
		for _, g := range n.GPUs {
			if g.MIG == nil || g.MIG.Dynamic || !slices.ContainsFunc(g.MIG.Instances, func(in MIGInstance) bool { return sameProfile(in.Profile, r.MIG) }) {
				continue
			}
			if g.MIG.AskedBy == "" {
				out.Mixed = appendNew(out.Mixed, n.Name)
				continue
			}
			out.Single = appendNew(out.Single, n.Name)
			out.Products = appendNew(out.Products, n.Model) // a single-strategy node's model is its product label
		}
	}
	return out
}

// modelAllowed says whether a node's GPUs are of one of the models asked (--gpu-type;
// any, when none is). A single-strategy node's product label names its instances
// ("A100-SXM4-80GB-MIG-1g.10gb"): its GPUs' model is the label's before "-MIG-", as the
// scheduler reads it.
func modelAllowed(n Node, models []string) bool {
	if len(models) == 0 || slices.Contains(models, n.Model) {
		return true
	}
	gpu, _, ok := mig.SingleProduct(n.Model)
	return ok && slices.Contains(models, gpu)
}

func appendNew(xs []string, x string) []string {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

// fitsSingleMIG tells whether some candidate node could ever give a request of the single
// strategy's instances: nodes of its products with that many instances of the profile.
// When none can, it says where the instances are to be had instead.
func fitsSingleMIG(cands []Node, r submit.Request, where string) error {
	flag := fmt.Sprintf("--mig %s --mig-strategy single", r.MIG)
	holds, most, mostOn := 0, 0, ""
	for _, n := range cands {
		if !slices.Contains(r.MIGProducts, n.Model) {
			continue
		}
		k := 0
		for _, g := range n.GPUs {
			if g.MIG == nil || g.MIG.AskedBy == "" {
				continue
			}
			for _, in := range g.MIG.Instances {
				if !in.Making && sameProfile(in.Profile, r.MIG) {
					k++
				}
			}
		}
		if k > most {
			most, mostOn = k, n.Name
		}
		holds += k / max(r.MIGCount, 1)
	}
	switch {
	case most == 0:
		msg := fmt.Sprintf("%s: no node of %s gives %s instances as the device plugin's single strategy (%s, %s <model>-MIG-%s)",
			flag, where, r.MIG, v1alpha1.GPUResource, v1alpha1.LabelGPUProduct, r.MIG)
		if off := FixedMIGOffer(cands, r); len(off.Mixed) > 0 {
			msg += fmt.Sprintf("; %s has them as the mixed strategy's %s%s: ask with --mig-strategy mixed (or leave it out)",
				strings.Join(off.Mixed, ", "), v1alpha1.MIGResourcePrefix, r.MIG)
		}
		return fmt.Errorf("%s", msg)
	case most < r.MIGCount:
		return fmt.Errorf("%s --gpu-count %d: no node can hold it: the most %s instances on one node of %s is %d (%s)", flag, r.MIGCount, r.MIG, where, most, mostOn)
	case r.Pods > holds:
		return fmt.Errorf("a gang of %d pods of %d %s instance(s) each starts whole or not at all, and %s hold %d such pods at most", r.Pods, r.MIGCount, r.MIG, where, holds)
	}
	return nil
}

// migShare is what a pod's MIG instances count as, in GPUs: each its compute slices' part
// of its GPU, as the scheduler counts it against the queue. Where the bind booked them
// (allot.dev/mig-instances), those; else those it asks (a fixed layout's, or the profile
// of one Allot lays out). The part is the GPU model's: the single strategy's pin names the
// model; else the profile's name says it, alike on every model Allot knows that has it (a
// 1g.10gb is 1/7 on each). ok is false for a pod asking no MIG instance, and for one whose
// instance is not sized yet (smallest, not booked): it is read as before.
func migShare(p *corev1.Pod) (float64, bool) {
	profile, count, single, err := convert.FixedMIG(p)
	if err != nil {
		return 0, false
	}
	gpu := ""
	if single {
		pin := p.Spec.NodeSelector[v1alpha1.LabelGPUProduct]
		if pin == "" {
			pin = firstPinned(p)
		}
		gpu, _, _ = mig.SingleProduct(pin)
	}
	dynamic := p.Annotations[v1alpha1.AnnotationMIG]
	if booked := p.Annotations[v1alpha1.AnnotationMIGInstances]; booked != "" && p.Spec.NodeName != "" && (profile != "" || dynamic != "") {
		total := int64(0)
		for _, b := range strings.Split(booked, ",") {
			dev, _, _ := strings.Cut(strings.TrimSpace(b), "@")
			_, prof, _ := strings.Cut(dev, "/")
			milli, ok := profileShare(gpu, prof)
			if !ok {
				return 0, false
			}
			total += milli
		}
		return float64(total) / 1000, true
	}
	switch {
	case profile != "":
	case dynamic != "" && dynamic != v1alpha1.MIGSmallest:
		profile, count = dynamic, 1
	default:
		return 0, false
	}
	milli, ok := profileShare(gpu, profile)
	return float64(milli*count) / 1000, ok
}

// profileShare is what an instance of the profile counts as, in thousandths of a GPU: on
// the model gpu names where it is known, else on every model having the profile when they
// agree.
func profileShare(gpu, profile string) (int64, bool) {
	if gpu != "" {
		if m, p, ok := mig.ForProfile(gpu, profile); ok {
			return m.Share(p), true
		}
	}
	share := int64(-1)
	for _, f := range mig.Families() {
		m, _ := mig.ByName(f)
		p, ok := m.Profile(profile)
		switch {
		case !ok:
		case share >= 0 && m.Share(p) != share:
			return 0, false
		default:
			share = m.Share(p)
		}
	}
	return share, share >= 0
}

// firstPinned is the first product a pod's required node affinity allows (FixedMIG found
// them all of one profile).
func firstPinned(p *corev1.Pod) string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == v1alpha1.LabelGPUProduct && len(e.Values) > 0 {
				return e.Values[0]
			}
		}
	}
	return ""
}
