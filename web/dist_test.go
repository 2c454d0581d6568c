package web

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDistIsBuiltFromSource: the committed dist, which the binary embeds, is what the
// sources build to now (type-checked by tsc, bundled by esbuild from the npm registry). A
// change to src without make web fails here rather than shipping the old pages.
func TestDistIsBuiltFromSource(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the front end is built with %s: %v (hack/test-deps.sh installs it)", tool, err)
		}
	}
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	run("npx", "--no-install", "tsc", "--noEmit")
	out := t.TempDir()
	run("node", "build.mjs", out)
	built := map[string]bool{}
	err := filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, path)
		built[rel] = true
		want, _ := os.ReadFile(path)
		got, err := os.ReadFile(filepath.Join("dist", rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("dist/%s differs from a fresh build: run make web and commit web/dist", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = fs.WalkDir(Dist, "dist", func(path string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel("dist", path); err == nil && !d.IsDir() && !built[rel] {
			t.Errorf("dist/%s is not built from the sources any more: run make web", rel)
		}
		return nil
	})
}
