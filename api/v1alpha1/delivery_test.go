package v1alpha1

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The layout the scheduler binds a sharing pod by: the container given the slice reads
// it, every other container and init container is told void. The older layout, every
// container reading the slice, is accepted only on a pod the API server created before
// the webhook changed to it: written on a new pod while the webhooks were skipped, each
// container would hold the whole slice.
func TestHasGPUEnvHoldsNewPodsToOneContainer(t *testing.T) {
	slice := corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: GPUEnvFieldPath("NVIDIA_VISIBLE_DEVICES")}}}
	void := corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"}
	all := corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}
	pod := func(created time.Time, main, side []corev1.EnvVar, init ...[]corev1.EnvVar) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Env: main}, {Name: "side", Env: side}}}}
		for _, env := range init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "init", Env: env})
		}
		return p
	}
	before, after := OneContainerSliceSince.Add(-time.Hour), OneContainerSliceSince.Add(time.Hour)
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"one container, the other void", pod(after, []corev1.EnvVar{slice}, []corev1.EnvVar{all, void}), true},
		{"every container, created since", pod(after, []corev1.EnvVar{slice}, []corev1.EnvVar{slice}), false},
		{"every container, no creation time", pod(time.Time{}, []corev1.EnvVar{slice}, []corev1.EnvVar{slice}), false},
		{"every container, created before", pod(before, []corev1.EnvVar{slice}, []corev1.EnvVar{slice}), true},
		{"the image's devices in the other", pod(before, []corev1.EnvVar{slice}, []corev1.EnvVar{all}), false},
		{"a sidecar reading the slice", pod(after, []corev1.EnvVar{slice}, []corev1.EnvVar{void}, []corev1.EnvVar{slice}), false},
		{"an init container told void", pod(after, []corev1.EnvVar{slice}, []corev1.EnvVar{void}, []corev1.EnvVar{void}), true},
		{"an init container with its image's", pod(after, []corev1.EnvVar{slice}, []corev1.EnvVar{void}, nil), false},
		{"no entries", pod(after, nil, nil), false},
	} {
		if got := HasGPUEnv(c.pod); got != c.want {
			t.Errorf("%s: HasGPUEnv %v, want %v", c.name, got, c.want)
		}
	}
}
