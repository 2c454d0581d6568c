package v1alpha1

import (
	"strings"
	"testing"
)

// A slice's devices are named as the node's device plugin names them in its CDI spec: by
// UUID (its default, or no label), or by index from the node's list of GPUs; a GPU the node
// does not list, or an unknown strategy, is an error naming the label.
func TestCDIDeviceIDsFollowTheDevicePluginsStrategy(t *testing.T) {
	node := "GPU-a,GPU-b,GPU-c"
	for _, c := range []struct {
		label, uuids, want, err string
	}{
		{"", "GPU-b", "GPU-b", ""},
		{"uuid", "GPU-b,GPU-c", "GPU-b,GPU-c", ""},
		{"index", "GPU-b", "1", ""},
		{"index", "GPU-c,GPU-a", "2,0", ""},
		{"index", "GPU-z", "", "does not list GPU GPU-z"},
		{"mig", "GPU-a", "", "is not one of uuid, index"},
	} {
		ids, err := ParseCDIDeviceIDs(c.label)
		var got string
		if err == nil {
			got, err = CDIDeviceIDs(c.uuids, ids, node)
		}
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("label %q, %s: %q, %v; want %q (error with %q)", c.label, c.uuids, got, err, c.want, c.err)
		}
	}
}
