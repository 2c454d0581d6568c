package sim

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: no scenario file, however malformed, makes the parser or a run panic.
// CI runs the seeds; explore with `go test ./sim -fuzz FuzzParse -fuzztime 60s`.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../examples/*.yaml")
	more, _ := filepath.Glob("testdata/scenarios/*.yaml")
	for _, p := range append(files, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		_, _ = Run(sc)
	})
}
