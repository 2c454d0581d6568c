package scheduler

import (
	"strconv"
	"testing"
)

// The fit cache keeps the answers of the specs asked this cycle and the one before: a spec
// asked every cycle keeps its answers however many others come and go (a tenant making
// thousands of claims of distinct specs cannot drop them), and one no longer asked goes.
func TestFitCacheKeepsWhatIsStillAsked(t *testing.T) {
	var c fitCache
	c.newCycle()
	c.of("waiting")["dgx-1"] = true
	for cycle := range 3 {
		c.newCycle()
		if ok, cached := c.of("waiting")["dgx-1"]; !ok || !cached {
			t.Fatalf("cycle %d: the answer for a spec still asked is gone", cycle)
		}
		for i := range 20_000 {
			c.of("tenant-" + strconv.Itoa(cycle) + "-" + strconv.Itoa(i))["dgx-1"] = false
		}
	}
	c.newCycle()
	c.of("waiting")
	c.newCycle()
	if len(c.last) != 1 || len(c.m) != 0 {
		t.Fatalf("specs no longer asked are kept: %d last cycle, %d this one", len(c.last), len(c.m))
	}
}
