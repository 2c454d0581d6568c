package migrate

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
)

// What Apply did to one queue.
const (
	Created   = "created"
	Updated   = "updated"
	Unchanged = "unchanged"
)

// Apply writes the queues in order (parents first): a queue that does not exist is
// created; one that does has the fields its source decides overwritten (Imported.Owns)
// and keeps the rest. Nothing is deleted. done is told of each queue as it is written.
func Apply(ctx context.Context, allot versioned.Interface, qs []*Imported, done func(name, what string)) error {
	queues := allot.AllotV1alpha1().Queues()
	for _, im := range qs {
		want := im.Queue
		var what string
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := queues.Get(ctx, want.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				q := want.DeepCopy()
				q.TypeMeta = metav1.TypeMeta{}
				_, err = queues.Create(ctx, q, metav1.CreateOptions{})
				what = Created
				return err
			}
			if err != nil {
				return err
			}
			next := cur.DeepCopy()
			for _, field := range im.Owns {
				if err := own(&next.Spec, &want.Spec, field); err != nil {
					return err
				}
			}
			if equality.Semantic.DeepEqual(next.Spec, cur.Spec) {
				what = Unchanged
				return nil
			}
			_, err = queues.Update(ctx, next, metav1.UpdateOptions{})
			what = Updated
			return err
		})
		if err != nil {
			return fmt.Errorf("queue %s (from %s/%s): %w", want.Name, im.From.Short, want.Name, err)
		}
		if done != nil {
			done(want.Name, what)
		}
	}
	return nil
}

// own copies one spec field from src to dst.
func own(dst, src *v1alpha1.QueueSpec, field string) error {
	switch field {
	case "parent":
		dst.Parent = src.Parent
	case "gpu":
		dst.GPU = *src.GPU.DeepCopy()
	case "cpu":
		dst.CPU = src.CPU.DeepCopy()
	case "memory":
		dst.Memory = src.Memory.DeepCopy()
	case "priority":
		dst.Priority = src.Priority
	case "nodePools":
		dst.NodePools = slices.Clone(src.NodePools)
	case "reclaimMinRuntime":
		dst.ReclaimMinRuntime = src.ReclaimMinRuntime.DeepCopy()
	case "preemptMinRuntime":
		dst.PreemptMinRuntime = src.PreemptMinRuntime.DeepCopy()
	default:
		return fmt.Errorf("no queue field %q to import", field) // a mistake in this package, not the input's
	}
	return nil
}
