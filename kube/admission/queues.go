package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/convert"
)

// AnnotationForceDelete on a Queue lets it be deleted while it still holds work (allot
// queue delete --force sets it): its running pods run on outside every queue's fair share,
// its pending ones wait with the reason that the queue is gone.
const AnnotationForceDelete = "allot.dev/force-delete"

// QueueValidator keeps the queue tree whole, which the CRD's schema cannot (it sees one
// object): a parent must exist and must not lead back to the queue, and a queue that still
// holds work or child queues is not deleted unless forced.
type QueueValidator struct {
	View   View
	Client kubernetes.Interface
	Allot  versioned.Interface
	// Accelerators are the kinds the scheduler schedules: a quota of any other kind would
	// count for nothing.
	Accelerators *convert.Accelerators
}

// queue finds a queue in the cache, else on the API server: a parent created a moment ago
// may not have reached the cache yet.
func (v *QueueValidator) queue(ctx context.Context, name string) (*v1alpha1.Queue, bool) {
	if q, ok := v.View.Queue(name); ok {
		return q, true
	}
	q, err := v.Allot.AllotV1alpha1().Queues().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, false
	}
	return q, true
}

// stillChild confirms on the API server what the cache says: a child deleted or moved a
// moment ago (allot queue delete lab dept deletes the child first) may still be cached.
func (v *QueueValidator) stillChild(ctx context.Context, name, parent string) bool {
	q, err := v.Allot.AllotV1alpha1().Queues().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		return true // cannot tell: refuse, as the cache says
	}
	return q.Spec.Parent == parent && q.DeletionTimestamp == nil
}

// Handle implements admission.Handler.
func (v *QueueValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	raw := req.Object.Raw
	if req.Operation == admissionv1.Delete {
		raw = req.OldObject.Raw
	}
	var q v1alpha1.Queue
	if err := json.Unmarshal(raw, &q); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var err error
	if req.Operation == admissionv1.Delete {
		err = v.checkDelete(ctx, &q)
	} else if err = v.checkParent(ctx, &q); err == nil {
		if err = v.checkKinds(&q); err == nil {
			err = v.checkPools(&q)
		}
	}
	if err != nil {
		return admission.Denied(err.Error())
	}
	return admission.Allowed("")
}

// checkParent refuses an unknown parent and a chain of parents that comes back.
func (v *QueueValidator) checkParent(ctx context.Context, q *v1alpha1.Queue) error {
	p := q.Spec.Parent
	if p == "" {
		return nil
	}
	if p == q.Name {
		return fmt.Errorf("spec.parent: queue %s cannot be its own parent", q.Name)
	}
	chain := []string{q.Name}
	for name := p; name != ""; {
		chain = append(chain, name)
		if name == q.Name {
			return fmt.Errorf("spec.parent: %s makes a cycle of parents: %s", p, strings.Join(chain, " → "))
		}
		parent, ok := v.queue(ctx, name)
		if !ok {
			if name == p {
				return fmt.Errorf("spec.parent: queue %q does not exist; queues: %s", p, queueList(v.View))
			}
			return nil // a broken chain higher up is that queue's problem, reported on it
		}
		if len(chain) > 64 {
			return fmt.Errorf("spec.parent: the chain of parents above %s is deeper than 64", q.Name)
		}
		name = parent.Spec.Parent
	}
	return nil
}

// checkKinds refuses a quota of a kind of accelerator the scheduler does not schedule.
func (v *QueueValidator) checkKinds(q *v1alpha1.Queue) error {
	if _, unknown := v.Accelerators.Queue(q); len(unknown) > 0 {
		return errors.New(v.Accelerators.UnknownKinds(unknown))
	}
	return nil
}

// checkPools refuses a list of pools for a class that its queue does not allow, and a
// quota of a pool that would make the cluster's queues divide more pools apart than the
// scheduler can.
func (v *QueueValidator) checkPools(q *v1alpha1.Queue) error {
	if allowed := q.Spec.NodePools; len(allowed) > 0 {
		for _, cl := range slices.Sorted(maps.Keys(q.Spec.ClassNodePools)) {
			for _, p := range q.Spec.ClassNodePools[cl] {
				if !slices.Contains(allowed, p) {
					return fmt.Errorf("spec.classNodePools.%s: node pool %q is not one of spec.nodePools (%s)", cl, p, strings.Join(allowed, ", "))
				}
			}
		}
	}
	if len(q.Spec.GPU.Pools) == 0 {
		return nil
	}
	all := []*v1alpha1.Queue{q}
	for _, name := range v.View.QueueNames() {
		if o, ok := v.View.Queue(name); ok && name != q.Name {
			all = append(all, o)
		}
	}
	if divided := convert.DividedPools(all); len(divided) > engine.MaxPools {
		return fmt.Errorf("spec.gpu.pools: with this queue the queues would give %d node pools quotas of their own (%s), and the scheduler divides at most %d apart: use pools other queues already name, or drop one",
			len(divided), strings.Join(divided, ", "), engine.MaxPools)
	}
	return nil
}

// checkDelete refuses to delete a queue with child queues, or with pods that have not
// finished, unless the queue carries AnnotationForceDelete.
func (v *QueueValidator) checkDelete(ctx context.Context, q *v1alpha1.Queue) error {
	if q.Annotations[AnnotationForceDelete] == "true" {
		return nil
	}
	var kids []string
	for _, name := range v.View.QueueNames() {
		if c, ok := v.View.Queue(name); ok && c.Spec.Parent == q.Name && v.stillChild(ctx, name, q.Name) {
			kids = append(kids, name)
		}
	}
	if len(kids) > 0 {
		slices.Sort(kids)
		return fmt.Errorf("queue %s has child queues %s: delete or move them first", q.Name, strings.Join(kids, ", "))
	}
	pods, err := v.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		LabelSelector: v1alpha1.LabelQueue + "=" + q.Name,
		FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"})
	if err != nil {
		return fmt.Errorf("queue %s: cannot tell whether it holds work: %v", q.Name, err)
	}
	var live []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p.Namespace+"/"+p.Name)
		}
	}
	if len(live) == 0 {
		return nil
	}
	slices.Sort(live)
	n, more := len(live), ""
	if len(live) > 3 {
		more = fmt.Sprintf(" and %d more", len(live)-3)
		live = live[:3]
	}
	return fmt.Errorf("queue %s still holds %s (%s%s): let them finish or delete them first, or force it (allot queue delete --force, or annotate the queue %s=true): running pods then run on outside every queue's share and pending ones wait for a queue",
		q.Name, plural(n, "pod"), strings.Join(live, ", "), more, AnnotationForceDelete)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ForceDelete deletes a queue even while it holds work: it annotates the queue so that the
// webhook lets the delete through.
func ForceDelete(ctx context.Context, allot versioned.Interface, name string) error {
	queues := allot.AllotV1alpha1().Queues()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, AnnotationForceDelete)
	if _, err := queues.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	err := queues.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
