package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/mig"
)

// Dynamic MIG: the scheduler writes on the node the instances it wants made
// (v1alpha1.AnnotationMIGWanted) for pods it placed on GPUs it lays out, and holds those
// pods until the inventory shows the instances. The agent makes them through NVML
// (ReconcileMIG: idle instances in their way are destroyed, busy ones never) and writes
// the inventory again, with each new MIG device's UUID for the scheduler to deliver.

// watchMIGWishes watches the agent's own Node and says, on the returned channel, when the
// wishes on it changed.
func (a *Agent) watchMIGWishes(ctx context.Context) <-chan string {
	out := make(chan string, 1)
	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opts.Node).String()
	}))
	inf := factory.Core().V1().Nodes().Informer()
	last := ""
	send := func(o any) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return
		}
		w := n.Annotations[v1alpha1.AnnotationMIGWanted]
		if w == last {
			return
		}
		last = w
		select {
		case <-out: // an older value no one read yet: the newer one stands
		default:
		}
		out <- w
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: send, UpdateFunc: func(_, n any) { send(n) }})
	factory.Start(ctx.Done())
	return out
}

// retryMIG tries again, once an interval, wishes that were not all made: an instance in
// the way may have gone idle since, or NVML answer now. Waiting for the wishes to change
// instead would leave the pods held for them waiting out their timeout.
func (a *Agent) retryMIG(ctx context.Context, lib nvml.Interface) {
	if a.migRetry {
		a.migRetry = !a.syncMIG(ctx, lib, a.migWanted)
	}
}

// syncMIG makes the wished instances on each device in MIG mode, and writes the
// inventory again when anything changed. It tells whether all was done: false when an
// instance could not be made or the inventory not written, to be tried again.
func (a *Agent) syncMIG(ctx context.Context, lib nvml.Interface, wanted string) bool {
	wishes, err := v1alpha1.ParseMIGWishes(wanted)
	if err != nil {
		a.migProblem(err.Error())
		return true // the same text fails the same way: wait for the scheduler's next
	}
	byGPU := map[string][]v1alpha1.MIGWish{}
	for _, w := range wishes {
		byGPU[w.GPU] = append(byGPU[w.GPU], w)
	}
	changed, done := false, true
	for i, g := range a.inv {
		if !g.MIG || len(byGPU[g.UUID]) == 0 {
			continue
		}
		model, ok := mig.ForProduct(g.Model, g.MemoryMiB<<20)
		if !ok {
			a.migProblem(fmt.Sprintf("GPU %d (%s): no MIG geometry known for the model; instances asked of it are not made", i, g.Model))
			continue // the model will not change: nothing to try again
		}
		dev, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			a.migProblem(nvmlError(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), r).Error())
			done = false
			continue
		}
		want := newestFirst(model, byGPU[g.UUID], func(stale v1alpha1.MIGWish, err error) {
			slog.Info("allot agent: MIG wish left out, a newer one overlaps it", "node", a.opts.Node, "gpu", i, "pod", stale.Pod, "err", err)
		})
		sort.Slice(want, func(x, y int) bool { return want[x].Start < want[y].Start })
		got, err := ReconcileMIG(dev, model, want)
		if err != nil {
			a.migProblem(fmt.Sprintf("GPU %d: %v", i, err))
			done = false
		}
		if len(got) > 0 {
			changed = true
		}
	}
	if !changed {
		return done
	}
	inv, err := ReadInventory(lib)
	if err != nil {
		a.migProblem(err.Error())
		return false
	}
	a.inv = inv
	if err := a.publishInventory(ctx); err != nil {
		slog.Warn("allot agent: MIG layout", "node", a.opts.Node, "err", err)
		return false
	}
	return done
}

// newestFirst takes a GPU's wishes newest first, leaving out any that overlaps a newer
// one: the scheduler books no two overlapping instances at once, so the older is stale
// (its pod gone or placed elsewhere, and the wish not yet taken off), and the newer is
// the pod waiting now. Asked for both, ReconcileMIG would refuse the whole GPU. A wish
// of a profile or start the model lacks is kept, for ReconcileMIG to refuse by name.
func newestFirst(model *mig.Model, wishes []v1alpha1.MIGWish, left func(v1alpha1.MIGWish, error)) []MIGPlacement {
	wishes = slices.Clone(wishes)
	slices.SortStableFunc(wishes, func(x, y v1alpha1.MIGWish) int { return y.Since.Compare(x.Since) })
	var out []MIGPlacement
	var layout mig.Layout
	for _, w := range wishes {
		place := MIGPlacement{Profile: w.Profile, Start: w.Start}
		if slices.Contains(out, place) {
			continue
		}
		if p, err := lookupProfile(model, w.Profile); err == nil && slices.Contains(p.Starts, w.Start) {
			if layout.Mask()&p.Mask(w.Start) != 0 {
				left(w, model.Valid(layout, p, w.Start))
				continue
			}
			layout = append(layout, mig.Placed{Profile: p, Start: w.Start})
		}
		out = append(out, place)
	}
	return out
}

// migProblem reports an instance the agent could not make, on the Node: once for the
// wishes as they stand, not again at each interval's retry.
func (a *Agent) migProblem(msg string) {
	if a.migSaid[msg] {
		return
	}
	if a.migSaid == nil {
		a.migSaid = map[string]bool{}
	}
	a.migSaid[msg] = true
	slog.Warn("allot agent: MIG: "+msg, "node", a.opts.Node)
	a.recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: a.opts.Node, UID: types.UID(a.opts.Node)}, corev1.EventTypeWarning, "MIGLayoutFailed", msg)
}
