package v1alpha1

import (
	"strings"
	"testing"
)

// A dynamic fraction's limit: one form, past a request on one GPU, never below it.
func TestDynamicFractionLimits(t *testing.T) {
	s, err := ParseGPUShare(map[string]string{AnnotationGPUMemory: "10Gi", AnnotationGPUMemoryLimit: "40Gi"})
	if err != nil || s.Memory != 10<<30 || s.MemoryLimit != 40<<30 {
		t.Errorf("10Gi up to 40Gi: %+v %v", s, err)
	}
	s, err = ParseGPUShare(map[string]string{AnnotationGPUFraction: "0.25", AnnotationGPUFractionLimit: "0.75"})
	if err != nil || s.FractionLimit != 0.75 {
		t.Errorf("0.25 up to 0.75: %+v %v", s, err)
	}
	for _, bad := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{AnnotationGPUMemoryLimit: "40Gi"}, "needs a request"},
		{map[string]string{AnnotationGPUMemory: "10Gi", AnnotationGPUMemoryLimit: "8Gi"}, "less than the request"},
		{map[string]string{AnnotationGPUFraction: "0.5", AnnotationGPUFractionLimit: "0.25"}, "less than the request"},
		{map[string]string{AnnotationGPUFraction: "0.5", AnnotationGPUFractionLimit: "2"}, "up to 1"},
		{map[string]string{AnnotationGPUMemory: "10Gi", AnnotationGPUMemoryLimit: "40Gi", AnnotationGPUFractionLimit: "0.5"}, "one way"},
		{map[string]string{AnnotationGPUMemory: "10Gi", AnnotationGPUCount: "2", AnnotationGPUMemoryLimit: "40Gi"}, "one GPU"},
	} {
		if _, err := ParseGPUShare(bad.ann); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error with %q", bad.ann, err, bad.want)
		}
	}
}
