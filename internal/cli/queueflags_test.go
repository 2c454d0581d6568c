package cli

import (
	"testing"

	"github.com/allot-dev/allot/kube/queueadmin"
)

// TestQueueFlagsAreQueueadminFields: allot queue create and edit have a flag for every
// field kube/queueadmin takes (the console's queue form sends the same names), so that a
// field added there is not missing here.
func TestQueueFlagsAreQueueadminFields(t *testing.T) {
	for _, verb := range []string{"create", "edit"} {
		cmd, _, err := NewRoot().Find([]string{"queue", verb})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range queueadmin.Names {
			if cmd.Flags().Lookup(name) == nil {
				t.Errorf("allot queue %s has no --%s", verb, name)
			}
		}
	}
}
