package convert

import (
	"fmt"
	"testing"
)

// ParseUtilization is the one reader of allot.dev/gpu-utilization: whole percentages and
// -1 (unread) per device, or nothing at all.
func TestParseUtilization(t *testing.T) {
	for in, want := range map[string]string{
		"10, 20,-1,100": "[10 20 -1 100]",
		"0":             "[0]",
		"":              "none",
		" ":             "none",
		"10,,20":        "none",
		"10,101":        "none",
		"10,-2":         "none",
		"12.5,3":        "none",
		"10,x":          "none",
	} {
		got := "none"
		if v, ok := ParseUtilization(in); ok {
			got = fmt.Sprint(v)
		}
		if got != want {
			t.Errorf("ParseUtilization(%q) = %s, want %s", in, got, want)
		}
	}
}
