package v1alpha1

import "testing"

// A pod runs in the stricter of what its node allows and what it asks; a node that says
// nothing allows capped only, and a pod that says nothing takes what its node allows.
func TestEffectiveComputeIsTheStricter(t *testing.T) {
	for _, c := range []struct{ node, pod, want string }{
		{"", "", ComputeCapped},
		{"", ComputeShared, ComputeCapped},
		{ComputeShared, "", ComputeShared},
		{ComputeShared, ComputeFair, ComputeFair},
		{ComputeShared, ComputeCapped, ComputeCapped},
		{ComputeFair, ComputeShared, ComputeFair},
		{"turbo", ComputeShared, ComputeCapped},
		{ComputeFair, "turbo", ComputeFair},
	} {
		if got := EffectiveCompute(c.node, c.pod); got != c.want {
			t.Errorf("node %q, pod %q: %s, want %s", c.node, c.pod, got, c.want)
		}
	}
	if _, err := ParseComputeMode("--compute", "turbo"); err == nil || err.Error() != `--compute: "turbo" is not one of capped, fair, shared` {
		t.Errorf("--compute turbo: %v", err)
	}
}
