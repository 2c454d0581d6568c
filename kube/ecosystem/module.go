package ecosystem

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"unicode"
)

// The CRDs come from the module the controller was built from, at the version this binary
// links, so that the schema the API server serves is the one the controller's types were
// generated with; nothing of those projects is copied into Allot.

// moduleVersion is the version of path this binary was built with (a replace's, if any).
// A test binary carries no list of modules; there the go command, run in Allot's module,
// says which version go.mod selects.
func moduleVersion(path string) string {
	if v := linkedVersion(path); v != "" {
		return v
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}", path).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// linkedVersion is the version of path in the binary's build information ("" if it has
// none, as in a test binary).
func linkedVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return ""
}

// moduleDir is where the Go module cache holds path at the version linked in.
func moduleDir(path string) (string, error) {
	version := moduleVersion(path)
	if version == "" {
		return "", fmt.Errorf("this binary has no build information naming module %s, so the version of its CRDs is unknown", path)
	}
	cache := modCache()
	dir := filepath.Join(cache, escape(path)+"@"+version)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("its CRDs are read from the Go module cache, and %s is not there (module cache %s, from GOMODCACHE, go env or $HOME/go/pkg/mod): "+
			"run `go mod download %s@%s` on this machine (it needs the Go toolchain), or set GOMODCACHE to a module cache that has it, then run allot up --with again",
			dir, cache, path, version)
	}
	return dir, nil
}

// modCache is the module cache: $GOMODCACHE, else what go env says where the toolchain
// exists, else its default place.
func modCache() string {
	if c := os.Getenv("GOMODCACHE"); c != "" {
		return c
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if c := strings.TrimSpace(string(out)); c != "" {
			return c
		}
	}
	if p := os.Getenv("GOPATH"); p != "" {
		return filepath.Join(filepath.SplitList(p)[0], "pkg", "mod")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go", "pkg", "mod")
}

// escape writes a module path as the module cache names its directory: each capital
// letter as '!' and its lower case.
func escape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
