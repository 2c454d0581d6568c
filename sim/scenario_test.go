package sim

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/allot-dev/allot/engine"
)

// TestScenarios plays every scenario under testdata/scenarios and examples/. Each file
// states its expectations; after every step the world must also stay unchanged for
// extra cycles, which proves that nothing flaps.
func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/scenarios/*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	files = append(files, examples...)
	if len(files) < 10 {
		t.Fatalf("found only %d scenario files", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			sc, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			reports, err := RunWith(sc, RunOptions{ExtraCycles: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(reports) != len(sc.Steps) {
				t.Fatalf("%d reports for %d steps", len(reports), len(sc.Steps))
			}
		})
	}
}

// TestExtraCyclesDetectFlapping shows that the stability check can fail: a world whose
// last plan was not applied is not settled.
func TestExtraCyclesDetectFlapping(t *testing.T) {
	w := NewWorld(engine.New(engine.Options{}), []engine.Node{{ID: "n", GPUs: []engine.GPU{{Memory: 1}}, CPU: 1000, Memory: 1 << 30}},
		[]engine.Queue{{ID: "q"}})
	w.Submit(engine.Job{ID: "j", Queue: "q", MinMember: 1, Pods: []engine.Pod{{ID: "p", Request: engine.PodRequest{GPUs: 1}}}}, 0)
	if err := w.checkQuiet(1); err == nil {
		t.Fatal("a world with a pending job that fits reported no change")
	}
}

// TestScenariosIgnoreQueueOrder plays every scenario again with its queues declared in the
// opposite order: every expectation still holds, because no rule breaks a tie by the order
// of the file (docs/design.md, rule 2).
func TestScenariosIgnoreQueueOrder(t *testing.T) {
	files, _ := filepath.Glob("testdata/scenarios/*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, f := range append(files, examples...) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			sc, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			slices.Reverse(sc.model.queues)
			if _, err := RunWith(sc, RunOptions{ExtraCycles: 1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
