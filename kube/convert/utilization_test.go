package convert

import (
	"strings"
	"testing"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A device its agent could not read is written as -1: no reading, and no problem with the
// node's report; a value outside 0-100 otherwise still is one.
func TestUnreadUtilizationIsNoProblem(t *testing.T) {
	if p := NodeProblems(gpuNode(map[string]string{v1alpha1.AnnotationGPUUtilization: "0,-1,40,-1"})); len(p) != 0 {
		t.Errorf("problems %q for devices the agent could not read", p)
	}
	p := strings.Join(NodeProblems(gpuNode(map[string]string{v1alpha1.AnnotationGPUUtilization: "0,-2,40,0"})), "\n")
	if !strings.Contains(p, "is not a percentage for each of the 4 devices") {
		t.Errorf("problems %q, want -2 named", p)
	}
}
