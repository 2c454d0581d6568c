package scheduler

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// An earlier webhook's ConfigMap (allot.dev/gpu-configmap) is filled only for a pod the API
// server created before the one-container layout. On a newer pod its owner wrote the name
// (the webhooks skipped), and the scheduler neither creates nor overwrites that ConfigMap.
//
//	old pod  → ConfigMap "old-cm" filled with the device
//	new pod  → the owner's ConfigMap "theirs" left as its owner wrote it
func TestOnlyOldPodsGetTheirConfigMapWritten(t *testing.T) {
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "default"}, Data: map[string]string{"app.conf": "mine"}}
	client := fake.NewClientset(theirs)
	s := &Scheduler{client: client}
	pod := func(name, cm string, created time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created), Annotations: map[string]string{v1alpha1.AnnotationConfigMap: cm}}}
	}
	device := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1"}
	ctx := context.Background()
	if err := s.writeConfigMap(ctx, pod("old", "old-cm", v1alpha1.OneContainerSliceSince.Add(-time.Hour)), device); err != nil {
		t.Fatal(err)
	}
	if err := s.writeConfigMap(ctx, pod("new", "theirs", v1alpha1.OneContainerSliceSince.Add(time.Hour)), device); err != nil {
		t.Fatal(err)
	}
	old, err := client.CoreV1().ConfigMaps("default").Get(ctx, "old-cm", metav1.GetOptions{})
	if err != nil || old.Data["NVIDIA_VISIBLE_DEVICES"] != "GPU-1" {
		t.Errorf("the old pod's ConfigMap: %v (%v), want its device", old, err)
	}
	got, err := client.CoreV1().ConfigMaps("default").Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil || got.Data["app.conf"] != "mine" || len(got.Data) != 1 || len(got.OwnerReferences) != 0 {
		t.Errorf("the owner's ConfigMap was rewritten for a new pod: %+v (%v)", got, err)
	}
}
