package convert

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/mig"
)

// The NVIDIA device plugin's single MIG strategy: every GPU of the node is in MIG mode with
// instances of one profile, and the plugin advertises them as nvidia.com/gpu, one "GPU" an
// instance. GPU Feature Discovery (the device plugin's internal/lm labelers) then labels
// the node nvidia.com/mig.strategy=single and writes the instances' attributes over the
// GPUs': nvidia.com/gpu.product "<model>-MIG-<profile>", nvidia.com/gpu.count the
// instances, nvidia.com/gpu.memory an instance's MiB ("<model>-MIG-INVALID" and a count of
// 0 where the GPUs' instances are not of one profile). Such a node's GPUs are read as GPUs
// in MIG mode with a fixed layout of that profile, and a pod's nvidia.com/gpu is read as
// instances of it only where the pod is pinned to that product, as NVIDIA's MIG documents
// tell users to target them: a pod asking plain GPUs must not be handed a 1g.

// LabelMIGStrategy is GPU Feature Discovery's label for the device plugin's MIG strategy.
// It is on every GPU node of a cluster whose device plugin runs the strategy, MIG or not,
// so it alone does not say a node's GPUs are MIG instances: the product label does.
const LabelMIGStrategy = "nvidia.com/mig.strategy"

// MIGStrategySingle is LabelMIGStrategy's value for the single strategy.
const MIGStrategySingle = "single"

// singleNode is what a single-strategy node's labels say of its GPUs.
type singleNode struct {
	ok      bool
	product string     // the label: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
	gpu     string     // the GPUs' model: "NVIDIA-A100-SXM4-40GB"
	profile string     // "1g.5gb", as the device plugin names it
	model   *mig.Model // nil where Allot does not know the model's geometry
}

// singleMIG reads whether a node's device plugin gives its GPUs' MIG instances as
// nvidia.com/gpu (the single strategy), and of what profile.
func singleMIG(n *corev1.Node) singleNode {
	product := n.Labels[v1alpha1.LabelGPUProduct]
	if n.Labels[LabelMIGStrategy] != MIGStrategySingle {
		return singleNode{}
	}
	gpu, profile, ok := mig.SingleProduct(product)
	if !ok {
		return singleNode{}
	}
	out := singleNode{ok: true, product: product, gpu: gpu, profile: profile}
	out.model, _, _ = mig.ForProfile(gpu, profile)
	return out
}

// askedBy is how a pod asks for a single-strategy node's instances, for the reason of a pod
// asking plain GPUs; empty for other nodes (their instances are asked by their resource).
func (s singleNode) askedBy() string {
	if !s.ok {
		return ""
	}
	return SingleMIGAsk(s.product)
}

// SingleMIGAsk says how a pod asks for the instances of a single-strategy node whose
// GPU Feature Discovery product label is product (engine.MIGDevice.AskedBy).
func SingleMIGAsk(product string) string {
	return fmt.Sprintf("given as %s by the device plugin's single MIG strategy: a pod asks for them with %s and nodeSelector %s: %s",
		v1alpha1.GPUResource, v1alpha1.GPUResource, v1alpha1.LabelGPUProduct, product)
}

// singleMIGProblem is what NodeProblems says of a single-strategy node whose GPUs are not
// scheduled: GFD found their instances not of one profile, or Allot does not know the
// model. Empty when there is nothing to say.
func singleMIGProblem(n *corev1.Node) string {
	product := n.Labels[v1alpha1.LabelGPUProduct]
	if n.Labels[LabelMIGStrategy] != MIGStrategySingle {
		return ""
	}
	if strings.HasSuffix(product, "-MIG-INVALID") {
		return fmt.Sprintf("label %s=%s: GPU Feature Discovery found the GPUs' MIG instances not all of one profile, which the device plugin's single strategy needs; nothing is scheduled on them (lay them out alike, or use the mixed strategy)", v1alpha1.LabelGPUProduct, product)
	}
	if s := singleMIG(n); s.ok && s.model == nil {
		return fmt.Sprintf("label %s=%s: MIG instances of a GPU whose geometry Allot does not know (families: %s); nothing is scheduled on them",
			v1alpha1.LabelGPUProduct, product, strings.Join(mig.Families(), ", "))
	}
	return ""
}

// FixedMIG reads the instances of a fixed MIG layout a pod asks for: the device plugin's
// mixed-strategy resource (nvidia.com/mig-<profile>), or its nvidia.com/gpu where the pod
// is pinned to the single strategy's product (single is then true). It is the one reading
// of both, for the scheduler, the webhook and the CLI's checks. An error says what is
// ambiguous.
func FixedMIG(p *corev1.Pod) (profile string, count int64, single bool, err error) {
	profile, count, err = v1alpha1.MIGResources(p)
	if err != nil {
		return "", 0, false, err
	}
	whole := v1alpha1.WholeGPUs(p)
	if whole == 0 {
		return profile, count, false, nil // a pin without nvidia.com/gpu asks nothing of it
	}
	pin, err := singleMIGPin(p)
	switch {
	case err != nil:
		return "", 0, false, err
	case pin == "":
		return profile, count, false, nil
	case profile != "":
		return "", 0, false, fmt.Errorf("asks %s%s and %s pinned to %s …-MIG-%s: a pod's instances are of one profile, asked one way", v1alpha1.MIGResourcePrefix, profile, v1alpha1.GPUResource, v1alpha1.LabelGPUProduct, pin)
	}
	return pin, min(whole, 64), true, nil
}

// singleMIGPin is the profile a pod is pinned to by GPU Feature Discovery's single-strategy
// product label: its nodeSelector names a "…-MIG-<profile>" product, or every term of its
// required node affinity allows only such products. Empty when the pod is not pinned to
// one; an error when its terms allow MIG instances and other nodes alike, or two profiles
// (its nvidia.com/gpu would mean instances on some nodes and GPUs on others).
func singleMIGPin(p *corev1.Pod) (string, error) {
	if v, ok := p.Spec.NodeSelector[v1alpha1.LabelGPUProduct]; ok {
		if _, prof, ok := mig.SingleProduct(v); ok {
			return prof, nil
		}
		return "", nil // pinned to whole GPUs of a model
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "", nil
	}
	var profiles, others []string
	unpinned := false
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		pinned := false
		for _, e := range term.MatchExpressions {
			if e.Key != v1alpha1.LabelGPUProduct || e.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			pinned = true
			for _, v := range e.Values {
				if _, prof, ok := mig.SingleProduct(v); ok {
					if !slices.Contains(profiles, prof) {
						profiles = append(profiles, prof)
					}
				} else {
					others = append(others, v)
				}
			}
		}
		unpinned = unpinned || !pinned
	}
	switch {
	case len(profiles) == 0:
		return "", nil
	case len(others) > 0 || unpinned:
		return "", fmt.Errorf("%s with a required node affinity that allows MIG instances of the device plugin's single strategy (%s …-MIG-%s) and other nodes: its GPUs would be instances on some nodes and whole GPUs on others; pin %s to …-MIG- products only in every term, or leave them out",
			v1alpha1.GPUResource, v1alpha1.LabelGPUProduct, profiles[0], v1alpha1.LabelGPUProduct)
	case len(profiles) > 1:
		return "", fmt.Errorf("%s with a required node affinity that allows MIG instances of two profiles (%s and %s): a pod's instances are of one profile; pin %s to products of one",
			v1alpha1.GPUResource, profiles[0], profiles[1], v1alpha1.LabelGPUProduct)
	}
	return profiles[0], nil
}
