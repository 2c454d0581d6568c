package v1alpha1

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzParseGPUShare: whatever a user writes in the sharing annotations, the parser returns
// an error naming the annotation, or a share the engine can place: a fraction in
// [0.001, 1), or a positive memory, never both, and a compute share only with one of them.
func FuzzParseGPUShare(f *testing.F) {
	f.Add("0.5", "", "", uint8(1))
	f.Add("", "8Gi", "30", uint8(2))
	f.Add("1e-9", "", "", uint8(1))
	f.Add("NaN", "-1", "101", uint8(7))
	// Comparing this with Quantity.Cmp took 23 s: the webhook and the scheduler stalled.
	f.Add("", "10e66666666", "", uint8(2))
	f.Fuzz(func(t *testing.T, frac, mem, compute string, present uint8) {
		a := map[string]string{}
		if present&1 != 0 {
			a[AnnotationGPUFraction] = frac
		}
		if present&2 != 0 {
			a[AnnotationGPUMemory] = mem
		}
		if present&4 != 0 {
			a[AnnotationGPUCompute] = compute
		}
		s, err := ParseGPUShare(a)
		if err != nil {
			if !strings.Contains(err.Error(), "allot.dev/gpu-") {
				t.Fatalf("error names no annotation: %v", err)
			}
			return
		}
		switch {
		case s.Fraction != 0 && !(s.Fraction >= 0.001 && s.Fraction < 1):
			t.Fatalf("fraction %v accepted from %q", s.Fraction, frac)
		case s.Memory < 0 || (s.Memory > 0 && s.Fraction > 0):
			t.Fatalf("share %+v accepted", s)
		case s.Compute != 0 && (!s.Shared() || s.Compute < 1 || s.Compute > 100):
			t.Fatalf("compute %d accepted with %+v", s.Compute, s)
		}
	})
}

// FuzzHeldGPUs: the placement annotations of a bound pod, however garbled by hand, give
// device indices that are not negative and a share in (0, 1].
func FuzzHeldGPUs(f *testing.F) {
	f.Add("0,1,2,3", "")
	f.Add("1", "500")
	f.Add(" 7 ,x,-1,,", "-3")
	f.Fuzz(func(t *testing.T, indices, share string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationGPUs: indices, AnnotationGPUShare: share}}}
		gpus, s := HeldGPUs(p)
		for _, g := range gpus {
			if g < 0 {
				t.Fatalf("index %d from %q", g, indices)
			}
		}
		if !(s > 0 && s <= 1) {
			t.Fatalf("share %v from %q", s, share)
		}
	})
}
