package submission

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned/fake"
)

// TestQueueExists: a misspelt queue is refused naming the queues there are, but a tenant who
// may not list Queues (Kubernetes' edit role in a namespace) is not refused for that: the
// admission webhook checks what they submit.
func TestQueueExists(t *testing.T) {
	admin := fake.NewSimpleClientset(&v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}})
	if err := QueueExists(context.Background(), admin, "team-a"); err != nil {
		t.Errorf("team-a exists: %v", err)
	}
	if err := QueueExists(context.Background(), admin, "tema-a"); err == nil || !strings.Contains(err.Error(), `queue "tema-a" does not exist; queues: team-a, team-b`) {
		t.Errorf("tema-a: %v", err)
	}
	tenant := fake.NewSimpleClientset()
	tenant.PrependReactor("list", "queues", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "allot.dev", Resource: "queues"}, "", nil)
	})
	if err := QueueExists(context.Background(), tenant, "team-a"); err != nil {
		t.Errorf("a tenant who may not list queues was refused: %v", err)
	}
}
