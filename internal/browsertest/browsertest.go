// Package browsertest drives a real headless Chromium for the dashboard's tests: it finds
// the browser, starts it with a fresh profile and no background networking (the test
// machine has no internet, and Chromium's own connections would only fail), and offers
// waits on what a user reads on the page.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Executable finds Chromium: $ALLOT_CHROMIUM, else the usual names on PATH.
func Executable() (string, error) {
	if p := os.Getenv("ALLOT_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found: install Debian's chromium (apt-get install chromium; .ci/run and make test-deps do) or set ALLOT_CHROMIUM")
}

// Browser is one headless Chromium with one tab.
type Browser struct {
	Ctx       context.Context
	Artifacts string // where screenshots go
}

// Start launches Chromium for the test; it is stopped when the test ends.
func Start(t *testing.T, width, height int) *Browser {
	t.Helper()
	exe, err := Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &Browser{Ctx: ctx, Artifacts: ArtifactDir(t)}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				t.Logf("browser console: %s", m)
			}
		}
	}()
	return b
}

// ArtifactDir is where a test's pictures go: $ALLOT_ARTIFACTS, else artifacts/ at the
// repository's root (git ignores it), one folder per test.
func ArtifactDir(t *testing.T) string {
	root := os.Getenv("ALLOT_ARTIFACTS")
	if root == "" {
		_, file, _, _ := runtime.Caller(0)
		root = filepath.Join(filepath.Dir(file), "..", "..", "artifacts")
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Open navigates to url.
func (b *Browser) Open(t *testing.T, url string) {
	t.Helper()
	if err := chromedp.Do(b.Ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
}

// Eval runs a JavaScript expression and returns its value (a promise's, once settled).
func Eval[T any](t *testing.T, b *Browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// WaitText waits until the text of every element sel matches, joined, satisfies ok — the
// page updates itself as the cluster changes, so a test waits as a reader would.
func (b *Browser) WaitText(t *testing.T, sel, what string, ok func(string) bool) string {
	t.Helper()
	expr := fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(e => e.innerText).join("\n")`, sel)
	var last string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](expr))
		if err == nil {
			last = v
			if ok(v) {
				return v
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Screenshot(t, "failed-"+strings.NewReplacer(" ", "-", "/", "-").Replace(what))
	t.Fatalf("%s: %s never showed it; last text:\n%s", what, sel, last)
	return ""
}

// Contains is a WaitText condition: the text holds every part.
func Contains(parts ...string) func(string) bool {
	return func(s string) bool {
		for _, p := range parts {
			if !strings.Contains(s, p) {
				return false
			}
		}
		return true
	}
}

// All holds when every one of checks holds.
func All(checks ...func(string) bool) func(string) bool {
	return func(s string) bool {
		for _, c := range checks {
			if !c(s) {
				return false
			}
		}
		return true
	}
}

// Screenshot writes the whole page as NAME.png among the test's artifacts.
func (b *Browser) Screenshot(t *testing.T, name string) string {
	t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(b.Artifacts, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
	}
	t.Logf("screenshot: %s", path)
	return path
}
