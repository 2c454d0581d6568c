// Package gotool builds a command that tests need (helm, Kubeflow's training operator) from
// the Go module proxy: go install PKG@VERSION into a directory of its own, once per process,
// with that command's own module graph (not Allot's). go run would link it again for each
// call.
package gotool

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// Tool is one command, built on first use.
type Tool struct {
	// Pkg is the main package at a version (MODULE/cmd/NAME@VERSION); Env is added to the
	// build's environment (CGO_ENABLED=0, say).
	Pkg string
	Env []string

	once sync.Once
	bin  string
	err  error
	mu   sync.Mutex
	dir  string // what Cleanup removes
}

// Path builds the command the first time and says where it is.
func (t *Tool) Path() (string, error) {
	t.once.Do(func() { t.bin, t.err = t.build() })
	return t.bin, t.err
}

func (t *Tool) build() (string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("the go command builds %s here: %w", t.Pkg, err)
	}
	name, _, _ := strings.Cut(path.Base(t.Pkg), "@")
	d, err := os.MkdirTemp("", "allot-"+name+"-")
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	t.dir = d
	t.mu.Unlock()
	cmd := exec.Command("go", "install", t.Pkg)
	cmd.Env = append(append(os.Environ(), "GOBIN="+d), t.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %v\n%s", t.Pkg, err, out)
	}
	return filepath.Join(d, name), nil
}

// Cleanup removes the command, if it was built (a TestMain's last step).
func (t *Tool) Cleanup() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir != "" {
		os.RemoveAll(t.dir)
	}
}
