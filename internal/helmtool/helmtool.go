// Package helmtool builds the pinned helm command for tests that render or install Allot's
// chart: from the Go module proxy (no other download), with helm's own module graph
// (internal/gotool).
package helmtool

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/allot-dev/allot/internal/gotool"
)

// Module is helm's main package at the pinned release.
const Module = "helm.sh/helm/v3/cmd/helm@v3.20.2"

// helm is built once per process.
var helm = &gotool.Tool{Pkg: Module}

// Run runs helm with args, its cache, configuration and data under home (a directory of
// the caller's, such as a test's TempDir), and returns what it printed.
func Run(home string, args ...string) (string, error) {
	bin, err := helm.Path()
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
func Cleanup() { helm.Cleanup() }
