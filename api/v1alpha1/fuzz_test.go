package v1alpha1

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzParseGPUShare: whatever a user writes in the sharing annotations, the parser returns
// an error naming the annotation, or a share the engine can place: a fraction in
// [0.001, 1), or a positive memory, never both; a compute share of 1 to 100 percent, alone
// or beside either; a count of devices from 1 to 64, only with a slice. (Bit 8 of present
// sets allot.dev/gpu-count to the compute string.)
func FuzzParseGPUShare(f *testing.F) {
	f.Add("0.5", "", "", uint8(1))
	f.Add("", "8Gi", "30", uint8(2))
	f.Add("1e-9", "", "", uint8(1))
	f.Add("NaN", "-1", "101", uint8(7))
	// Comparing this with Quantity.Cmp took 23 s: the webhook and the scheduler stalled.
	f.Add("", "10e66666666", "", uint8(2))
	f.Add("", "", "30", uint8(4))
	f.Add("0.5", "", "2", uint8(9))
	f.Add("", "", "2", uint8(8))
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
		if present&8 != 0 {
			a[AnnotationGPUCount] = compute
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
		case s.Compute < 0 || s.Compute > 100:
			t.Fatalf("compute %d accepted with %+v", s.Compute, s)
		case s.Count != 0 && (!s.Shared() || s.Count < 1 || s.Count > MaxGPUCount):
			t.Fatalf("count %d accepted with %+v", s.Count, s)
		case s.Shared() != (present&7 != 0):
			t.Fatalf("share %+v from %v", s, a)
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

// FuzzParseGPUChoice: whatever is written in the device-choice annotations gives an error
// naming the annotation, or lists with no empty entry and a policy the engine knows.
func FuzzParseGPUChoice(f *testing.F) {
	f.Add("GPU-1,GPU-2", "", "T4", "required", "binpack", "spread")
	f.Add(" , ", "x", "", "yes", "mutex", "topology-aware")
	f.Fuzz(func(t *testing.T, uuids, exclude, types, island, node, gpu string) {
		a := map[string]string{}
		for k, v := range map[string]string{AnnotationGPUUUIDPick: uuids, AnnotationGPUUUIDExclude: exclude, AnnotationGPUTypeExclude: types,
			AnnotationGPUIsland: island, AnnotationNodePolicy: node, AnnotationGPUPolicy: gpu} {
			if v != "" {
				a[k] = v
			}
		}
		c, err := ParseGPUChoice(a)
		if err != nil {
			if !strings.Contains(err.Error(), "allot.dev/") {
				t.Fatalf("error names no annotation: %v", err)
			}
			return
		}
		for _, l := range [][]string{c.UUIDs, c.ExcludeUUIDs, c.ExcludeTypes} {
			for _, v := range l {
				if strings.TrimSpace(v) == "" || strings.Contains(v, ",") {
					t.Fatalf("entry %q from %v", v, a)
				}
			}
		}
		for _, p := range []string{c.NodePolicy, c.GPUPolicy} {
			if p != "" && p != "binpack" && p != "spread" {
				t.Fatalf("policy %q from %v", p, a)
			}
		}
	})
}
