package queueadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/inspect"
)

// Create makes queue name with the fields set. The API server, its CRD's validation and
// Allot's webhook judge it as whoever allot is (RBAC: an admin's).
func Create(ctx context.Context, allot versioned.Interface, name string, flags Flags) error {
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := Apply(flags, &q.Spec); err != nil {
		return err
	}
	if _, err := allot.AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	return nil
}

// Edit changes the fields set of queue name, and only those: they are sent as a merge
// patch on the version read, so that a field this build does not know (a newer CRD), and
// the way the others are written, stay as they are. The scheduler writes the queue's
// status all the time: a write that finds the object moved on reads it again.
func Edit(ctx context.Context, allot versioned.Interface, name string, flags Flags) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		queues := allot.AllotV1alpha1().Queues()
		q, err := queues.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("queue %q does not exist; queues: %s", name, strings.Join(inspect.QueueNames(ctx, allot), ", "))
		} else if err != nil {
			return err
		}
		before, err := json.Marshal(q.Spec)
		if err != nil {
			return err
		}
		if err := Apply(flags, &q.Spec); err != nil {
			return err
		}
		after, err := json.Marshal(q.Spec)
		if err != nil {
			return err
		}
		change, err := jsonpatch.CreateMergePatch(before, after)
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": q.ResourceVersion}, "spec": json.RawMessage(change)})
		if err != nil {
			return err
		}
		_, err = queues.Patch(ctx, q.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if st := apierrors.APIStatus(nil); errors.As(err, &st) {
		return fmt.Errorf("queue %s: %w", name, err) // the API server's refusal
	}
	return err // nil, or ours, already saying what to do
}
