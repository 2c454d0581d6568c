package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// The GPUs a pod holds follow Kubernetes' rule for init containers and sidecars: what the
// kubelet's device manager allocates, not what spec.containers alone asks.
func TestWholeGPUsCountsInitContainersAndSidecars(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	ctr := func(name string, gpus int64, sidecar bool) corev1.Container {
		c := corev1.Container{Name: name}
		if gpus > 0 {
			c.Resources.Limits = corev1.ResourceList{v1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
		}
		if sidecar {
			c.RestartPolicy = &always
		}
		return c
	}
	for _, c := range []struct {
		name       string
		init, main []corev1.Container
		want       int64
	}{
		{"containers alone", nil, []corev1.Container{ctr("a", 1, false), ctr("b", 2, false)}, 3},
		{"a sidecar asks, the container none", []corev1.Container{ctr("side", 4, true)}, []corev1.Container{ctr("main", 0, false)}, 4},
		{"a sidecar beside a container", []corev1.Container{ctr("side", 1, true)}, []corev1.Container{ctr("main", 2, false)}, 3},
		{"a plain init container hands its GPUs on", []corev1.Container{ctr("setup", 2, false)}, []corev1.Container{ctr("main", 1, false)}, 2},
		{"a plain init container asking fewer", []corev1.Container{ctr("setup", 1, false)}, []corev1.Container{ctr("main", 3, false)}, 3},
		{"a plain init container after a sidecar runs beside it",
			[]corev1.Container{ctr("side", 2, true), ctr("setup", 3, false)}, []corev1.Container{ctr("main", 0, false)}, 5},
		{"a plain init container before a sidecar does not",
			[]corev1.Container{ctr("setup", 3, false), ctr("side", 2, true)}, []corev1.Container{ctr("main", 0, false)}, 3},
		{"requests alone", nil, []corev1.Container{{Name: "r", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("2")}}}}, 2},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: c.init, Containers: c.main}}
		if got := v1alpha1.WholeGPUs(p); got != c.want {
			t.Errorf("%s: WholeGPUs %d, want %d", c.name, got, c.want)
		}
	}
}

// A MIG instance asked by a sidecar is one the pod holds.
func TestMIGResourcesCountsSidecars(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	mig := corev1.ResourceName(v1alpha1.MIGResourcePrefix + "1g.10gb")
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{mig: resource.MustParse("2")}}}},
		Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{mig: resource.MustParse("1")}}}}}}
	prof, n, err := v1alpha1.MIGResources(p)
	if err != nil || prof != "1g.10gb" || n != 3 {
		t.Errorf("MIGResources = %q %d %v, want 1g.10gb 3", prof, n, err)
	}
}

// A device-choice list longer than the limit is refused naming the annotation and the limit,
// before it is split; one at the limit is read.
func TestGPUChoiceListsAreBounded(t *testing.T) {
	list := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("GPU-%036d", i)
		}
		return strings.Join(s, ",")
	}
	for _, key := range []string{v1alpha1.AnnotationGPUUUIDPick, v1alpha1.AnnotationGPUUUIDExclude, v1alpha1.AnnotationGPUTypeExclude, v1alpha1.AnnotationGPUTypes} {
		if _, err := v1alpha1.ParseGPUChoice(map[string]string{key: list(v1alpha1.MaxChoiceEntries)}); err != nil {
			t.Errorf("%s of %d entries: %v", key, v1alpha1.MaxChoiceEntries, err)
		}
		_, err := v1alpha1.ParseGPUChoice(map[string]string{key: list(v1alpha1.MaxChoiceEntries + 1)})
		if want := fmt.Sprintf("%s: %d entries is too many: at most %d", key, v1alpha1.MaxChoiceEntries+1, v1alpha1.MaxChoiceEntries); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s of %d entries: %v, want %q", key, v1alpha1.MaxChoiceEntries+1, err, want)
		}
		_, err = v1alpha1.ParseGPUChoice(map[string]string{key: strings.Repeat("x", v1alpha1.MaxChoiceEntryLength+1)})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s: an entry of %d characters is too long: at most %d", key, v1alpha1.MaxChoiceEntryLength+1, v1alpha1.MaxChoiceEntryLength)) {
			t.Errorf("%s with a long entry: %v", key, err)
		}
	}
}
