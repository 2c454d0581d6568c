// Package helmtool builds the pinned helm command for tests that render or install Allot's
// chart: from the Go module proxy (no other download), with the same Kubernetes libraries
// as the rest of the project.
package helmtool

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Module is helm's main package at the pinned release.
const Module = "helm.sh/helm/v3/cmd/helm@v3.20.2"

var (
	mu  sync.Mutex
	dir string // where binary built it; Cleanup removes it
)

// binary is helm, built once per process (go install into a directory of its own): go run
// would link it again for each call.
var binary = sync.OnceValues(func() (string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("the go command builds helm here: %w", err)
	}
	d, err := os.MkdirTemp("", "allot-helm-")
	if err != nil {
		return "", err
	}
	mu.Lock()
	dir = d
	mu.Unlock()
	cmd := exec.Command("go", "install", Module)
	cmd.Env = append(os.Environ(), "GOBIN="+d)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %v\n%s", Module, err, out)
	}
	return filepath.Join(d, "helm"), nil
})

// Run runs helm with args, its cache, configuration and data under home (a directory of
// the caller's, such as a test's TempDir), and returns what it printed.
func Run(home string, args ...string) (string, error) {
	bin, err := binary()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// Cleanup removes the helm this process built, if any (a TestMain's last step).
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
}
