// Package docs_test keeps the documentation honest: every relative link of the
// repository's Markdown leads to a file that exists, every command the front page and the
// CLI reference show is one the Makefile or the allot binary has, and every test the pages
// name by `go test ./PKG -run NAME` is there to run.
package docs_test

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/internal/cli"
)

// repoRoot is the repository's root as seen from this package's directory.
const repoRoot = ".."

// TestRelativeLinksResolve: a relative link or image in any Markdown file of the repository
// (README.md, docs/*.md, every tracked *.md) points at a file or directory inside the
// repository that exists.
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	if len(files) < 3 {
		t.Fatalf("found only %d Markdown files: %v", len(files), files)
	}
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, p := range brokenLinks(repoRoot, f, string(text)) {
			t.Errorf("%s: %s", f, p)
		}
	}
}

// TestCommandsExist: each `make TARGET` and `allot SUBCOMMAND…` (also as ./bin/allot or
// bin/allot) in the fenced code blocks of README.md and docs/cli.md names a target the
// Makefile has and a subcommand path the CLI has.
func TestCommandsExist(t *testing.T) {
	targets := makeTargets(t)
	root := newCLI()
	for _, f := range []string{"README.md", "docs/cli.md"} {
		text, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cmds := commands(string(text))
		if len(cmds) == 0 {
			t.Errorf("%s: no commands found in its code blocks", f)
		}
		for _, c := range cmds {
			if err := checkCommand(root, targets, c.text); err != nil {
				t.Errorf("%s:%d: %s: %v", f, c.line, c.text, err)
			}
		}
	}
}

// TestNamedTestsExist: every `go test ./PKG -run PATTERN` (or -bench) on the front page and
// the pages under docs/ matches a test (or benchmark) of that package, and a scenario named
// as a subtest of TestScenarios is a scenario file.
func TestNamedTestsExist(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	files = append(files, filepath.Join(repoRoot, "README.md"))
	n := 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		refs := testRefs(string(text))
		n += len(refs)
		for _, r := range refs {
			if err := checkTestRef(repoRoot, r); err != nil {
				t.Errorf("%s: %s: %v", filepath.Base(f), r.text, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no `go test … -run NAME` found in the docs")
	}
}

// TestCheckersCatchMistakes shows that the checks above can fail: a broken link, a link out
// of the repository, a make target and CLI subcommands that do not exist, and a test that
// is not there are each reported; what is right, and what is not a command, is not.
func TestCheckersCatchMistakes(t *testing.T) {
	links := []struct {
		name, file, text string
		broken           int
	}{
		{"missing file", "docs/x.md", "see [the page](nope.md) and [this](design.md)", 1},
		{"missing image", "README.md", `<img src="docs/nope.svg" width="600">` + "\n![ok](docs/soak.svg)", 1},
		{"anchor stripped", "README.md", "[rules](docs/design.md#scheduling-rules) and [here](#quick-start)", 0},
		{"anchor on a missing file", "README.md", "[rules](docs/nope.md#rules)", 1},
		{"outside the repository", "README.md", "[design](../shared/DESIGN.md)", 1},
		{"web and mail", "README.md", "[a](https://example.com/x.md) [b](mailto:a@b.c) [c](http://x)", 0},
		{"directory", "README.md", "[chart](deploy/helm/allot) [engine](engine/)", 0},
		{"in code, not a link", "README.md", "```\n[x](nope.md)\n```\n`[y](nope2.md)`", 0},
		{"reference definition", "README.md", "[x][1]\n\n[1]: docs/nope.md", 1},
		{"title after the path", "README.md", `[x](docs/design.md "Design") [y](docs/nope.md "Nope")`, 1},
	}
	for _, c := range links {
		t.Run("link/"+c.name, func(t *testing.T) {
			if got := brokenLinks(repoRoot, c.file, c.text); len(got) != c.broken {
				t.Errorf("%d broken links, want %d: %q", len(got), c.broken, got)
			}
		})
	}

	targets := map[string]bool{"run": true, "test": true, "bench-kube": true}
	root := newCLI()
	cmds := []struct {
		line string
		ok   bool
	}{
		{"make run", true},
		{"make nosuch", false},
		{"make bench-kube MODE=backlog ROUNDS=3", true},
		{"FAULTS_TIME=30m make test", true},
		{"allot list -o wide", true},
		{"allot lsit", false},
		{"allot top nodes", true},
		{"allot top gpus", false},
		{"allot queue create team-a --quota 4", true},
		{"allot queue rename a b", false},
		{"./bin/allot sim trace --nodes n.csv --pods p.csv", true},
		{"bin/allot sim replay --nodes n.csv", false},
		{"./bin/allot up --nodes 250 &", true},
		{"allot --version", true},
		{"allot completion bash", true},
		{"allot describe team-a-train-5", true},
		{"make build && ./bin/allot nope", false},
		{"kubectl get pods", true}, // not ours to check
	}
	for _, c := range cmds {
		t.Run("command/"+c.line, func(t *testing.T) {
			err := checkCommand(root, targets, c.line)
			if (err == nil) != c.ok {
				t.Errorf("checkCommand(%q) = %v, want ok=%v", c.line, err, c.ok)
			}
		})
	}

	// Only lines that are commands are taken from code blocks: all of a shell block, and
	// the prompted lines ($ …) of any other; output that starts with "allot" is not one.
	block := "```sh\nmake run   # comment\n./bin/allot sim trace --nodes a \\\n    --pods b\n```\n" +
		"```\n$ allot queues\nallot (default)  95.48%\nallot binds at 84%\n```\n```yaml\nallot: x\n```\n"
	var got []string
	for _, c := range commands(block) {
		got = append(got, c.text)
	}
	want := []string{"make run", "./bin/allot sim trace --nodes a --pods b", "allot queues"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("commands = %q, want %q", got, want)
	}

	refs := []struct {
		text string
		ok   bool
	}{
		{"go test ./engine -run TestQuotaIsGuaranteed", true},
		{"go test ./engine -run TestQuotaIsNotGuaranteed", false},
		{"go test ./sim -run TestScenarios/reclaim-trade.yaml", true},
		{"go test ./sim -run TestScenarios/no-such-scenario.yaml", false},
		{"go test ./kube/stack -run 'TestMPSDaemonPerSharedGPU|TestHAMiCoreSharingIsPreloaded'", true},
		{"go test ./engine -run '^$' -bench BenchmarkNoSuchCycle", false},
		{"go test ./nosuchpkg -run TestX", false},
	}
	for _, c := range refs {
		t.Run("testref/"+c.text, func(t *testing.T) {
			rs := testRefs("`" + c.text + "`")
			if len(rs) != 1 {
				t.Fatalf("%d references found in %q", len(rs), c.text)
			}
			err := checkTestRef(repoRoot, rs[0])
			if (err == nil) != c.ok {
				t.Errorf("checkTestRef(%q) = %v, want ok=%v", c.text, err, c.ok)
			}
		})
	}
}

// markdownFiles lists the repository's Markdown files, relative to its root: the tracked
// ones (git ls-files), and README.md and docs/*.md whether tracked yet or not.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	set := map[string]bool{"README.md": true}
	docs, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	for _, d := range docs {
		set["docs/"+filepath.Base(d)] = true
	}
	cmd := exec.Command("git", "ls-files", "*.md")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Logf("git ls-files: %v; checking README.md and docs/*.md only", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if _, err := os.Stat(filepath.Join(repoRoot, l)); err == nil { // deleted but not yet committed: skip
				set[l] = true
			}
		}
	}
	var files []string
	for f := range set {
		files = append(files, f)
	}
	sort.Strings(files)
	return files
}

var (
	fenceRe     = regexp.MustCompile("(?m)^ {0,3}(```|~~~)")
	codeSpanRe  = regexp.MustCompile("`+[^`]*`+")
	inlineRe    = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	imgRe       = regexp.MustCompile(`(?i)<img\b[^>]*\bsrc\s*=\s*["']?([^"'\s>]+)`)
	refDefRe    = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	schemeRe    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	makeRuleRe  = regexp.MustCompile(`(?m)^([A-Za-z0-9_.][A-Za-z0-9_.-]*)\s*:([^=]|$)`)
	testFuncRe  = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
	goTestStart = regexp.MustCompile(`\bgo test\s`)
)

// prose returns the text with fenced code blocks removed and code spans replaced by a
// placeholder, so that what looks like a link in code is not taken for one.
func prose(text string) string {
	var b strings.Builder
	in := false
	var fence string
	for _, l := range strings.SplitAfter(text, "\n") {
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			switch {
			case !in:
				in, fence = true, m[1]
				continue
			case m[1] == fence:
				in = false
				continue
			}
		}
		if in {
			continue
		}
		b.WriteString(codeSpanRe.ReplaceAllString(l, "code"))
	}
	return b.String()
}

// brokenLinks lists what is wrong with the relative links and images of one Markdown file
// (its path relative to root): targets that do not exist, or that lie outside root.
// Links with a scheme (https:, mailto:) and pure #anchors are not checked; an anchor is
// stripped from a path.
func brokenLinks(root, file, text string) []string {
	text = prose(text)
	var targets []string
	for _, m := range inlineRe.FindAllStringSubmatch(text, -1) {
		targets = append(targets, m[2])
	}
	for _, m := range imgRe.FindAllStringSubmatch(text, -1) {
		targets = append(targets, m[1])
	}
	for _, m := range refDefRe.FindAllStringSubmatch(text, -1) {
		targets = append(targets, m[1])
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, target := range targets {
		if target == "" || strings.HasPrefix(target, "#") || schemeRe.MatchString(target) {
			continue
		}
		p := target
		if i := strings.IndexAny(p, "#?"); i >= 0 {
			p = p[:i]
		}
		if u, err := url.PathUnescape(p); err == nil {
			p = u
		}
		var full string
		if strings.HasPrefix(p, "/") {
			full = filepath.Join(absRoot, filepath.FromSlash(p))
		} else {
			full = filepath.Join(absRoot, filepath.Dir(filepath.FromSlash(file)), filepath.FromSlash(p))
		}
		if rel, err := filepath.Rel(absRoot, full); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			problems = append(problems, fmt.Sprintf("link %q leads out of the repository: the docs must stand on their own", target))
			continue
		}
		if _, err := os.Stat(full); err != nil {
			problems = append(problems, fmt.Sprintf("link %q: no such file or directory", target))
		}
	}
	return problems
}

type command struct {
	line int
	text string
}

// commands lists the command lines of a Markdown text's fenced code blocks: every line of a
// shell block (```sh, bash, shell, console, zsh) and the prompted lines ("$ …") of any
// other block; the prompt, comments and line continuations are taken off.
func commands(text string) []command {
	var cmds []command
	in, shell := false, false
	var fence, pending string
	pendingLine := 0
	for i, l := range strings.Split(text, "\n") {
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			if !in {
				in, fence = true, m[1]
				info := strings.Fields(strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), "`~")))
				lang := ""
				if len(info) > 0 {
					lang = strings.ToLower(info[0])
				}
				shell = lang == "sh" || lang == "bash" || lang == "shell" || lang == "console" || lang == "zsh"
				pending = ""
				continue
			}
			if m[1] == fence {
				in = false
				continue
			}
		}
		if !in {
			continue
		}
		s := strings.TrimSpace(l)
		if pending == "" {
			switch {
			case strings.HasPrefix(s, "$ "):
				s = strings.TrimSpace(s[2:])
			case !shell:
				continue
			}
			pendingLine = i + 1
		}
		if strings.HasPrefix(s, "#") && pending == "" {
			continue
		}
		if j := strings.Index(s, " #"); j >= 0 {
			s = strings.TrimSpace(s[:j])
		}
		if strings.HasSuffix(s, "\\") {
			pending += strings.TrimSpace(strings.TrimSuffix(s, "\\")) + " "
			continue
		}
		s = strings.TrimSpace(pending + s)
		pending = ""
		if s != "" {
			cmds = append(cmds, command{pendingLine, s})
		}
	}
	return cmds
}

// newCLI is the allot command tree with cobra's own help and completion commands added, as
// Execute adds them.
func newCLI() *cobra.Command {
	root := cli.NewRoot()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// makeTargets reads the rules of the repository's Makefile.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeRuleRe.FindAllStringSubmatch(string(mk), -1) {
		if !strings.HasPrefix(m[1], ".") {
			targets[m[1]] = true
		}
	}
	if !targets["run"] || !targets["test"] {
		t.Fatalf("the Makefile's targets as read: %v; want run and test among them", targets)
	}
	return targets
}

// checkCommand checks one command line (several when joined by &&, ||, ; or |): make's
// targets against the Makefile's, allot's subcommands against the CLI's. Words up to the
// first one that starts with "-" name the subcommand and its arguments. Other commands
// (kubectl, helm, …) are not checked.
func checkCommand(root *cobra.Command, targets map[string]bool, line string) error {
	for _, part := range regexp.MustCompile(`&&|\|\||;|\|`).Split(line, -1) {
		words := strings.Fields(part)
		for len(words) > 0 && strings.Contains(words[0], "=") { // VAR=value before the command
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		switch words[0] {
		case "make":
			for _, w := range words[1:] {
				if strings.HasPrefix(w, "-") || strings.Contains(w, "=") || w == "&" {
					continue
				}
				if !targets[w] {
					return fmt.Errorf("make has no target %q", w)
				}
			}
		case "allot", "./bin/allot", "bin/allot":
			var args []string
			for _, w := range words[1:] {
				if strings.HasPrefix(w, "-") || w == "&" {
					break
				}
				args = append(args, w)
			}
			if err := checkCLIPath(root, args); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkCLIPath says whether args name a command of the tree: cobra's Find walks down the
// subcommands; what is left over must then be arguments the command takes, not a
// subcommand it lacks.
func checkCLIPath(root *cobra.Command, args []string) error {
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if len(rest) == 0 || !cmd.HasSubCommands() {
		return nil
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%q has no subcommand %q (it has: %s)", cmd.CommandPath(), rest[0], subcommandNames(cmd))
	}
	if err := cmd.ValidateArgs(rest); err != nil {
		return fmt.Errorf("%q has no subcommand %q and takes no such argument (subcommands: %s): %v", cmd.CommandPath(), rest[0], subcommandNames(cmd), err)
	}
	return nil
}

func subcommandNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		names = append(names, c.Name())
	}
	return strings.Join(names, ", ")
}

type testRef struct {
	text  string
	pkgs  []string
	run   string // -run's pattern
	bench string // -bench's pattern
}

// testRefs finds `go test ./PKG … -run PATTERN` and `… -bench PATTERN` in a text, also
// when a line break falls inside the command.
func testRefs(text string) []testRef {
	flat := strings.Join(strings.Fields(text), " ")
	valued := map[string]bool{"-tags": true, "-benchtime": true, "-cpu": true, "-timeout": true, "-count": true, "-parallel": true, "-fuzztime": true, "-fuzz": true}
	var refs []testRef
	for _, loc := range goTestStart.FindAllStringIndex(flat, -1) {
		words := strings.Fields(flat[loc[1]:])
		var r testRef
		var used []string
	scan:
		for i := 0; i < len(words); i++ {
			w := words[i]
			end := strings.ContainsAny(w, "`") && !strings.HasPrefix(w, "`")
			w = clean(w)
			used = append(used, w)
			switch {
			case strings.HasPrefix(w, "./"):
				r.pkgs = append(r.pkgs, w)
			case w == "-run" || w == "-bench":
				if i+1 < len(words) {
					i++
					v := words[i]
					end = strings.ContainsAny(v, "`") && !strings.HasPrefix(v, "`")
					v = clean(v)
					used = append(used, v)
					if w == "-run" {
						r.run = v
					} else {
						r.bench = v
					}
				}
			case valued[w]:
				i++
			case strings.HasPrefix(w, "-"):
			default:
				break scan
			}
			if end {
				break
			}
		}
		if r.run != "" || r.bench != "" {
			r.text = "go test " + strings.Join(used, " ")
			refs = append(refs, r)
		}
	}
	return refs
}

// clean takes off what surrounds a word of a command in prose: code-span backticks,
// quotes, and the punctuation of the sentence after it.
func clean(w string) string {
	return strings.TrimRight(strings.TrimLeft(w, "`'\"("), "`'\",.;:)")
}

// checkTestRef says whether the tests a reference names exist: its -run pattern matches a
// Test function (and its -bench pattern a Benchmark) of one of its packages; a .yaml
// subtest of TestScenarios must be a scenario file.
func checkTestRef(root string, r testRef) error {
	var funcs []string
	for _, p := range r.pkgs {
		if strings.Contains(p, "...") {
			return nil
		}
		files, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(p), "*_test.go"))
		if len(files) == 0 {
			return fmt.Errorf("package %s has no tests", p)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			for _, m := range testFuncRe.FindAllStringSubmatch(string(b), -1) {
				funcs = append(funcs, m[1])
			}
		}
	}
	if len(r.pkgs) == 0 {
		return nil
	}
	match := func(pattern, prefix string) error {
		if pattern == "" || pattern == "^$" || pattern == "." {
			return nil
		}
		parts := strings.Split(pattern, "/")
		re, err := regexp.Compile(parts[0])
		if err != nil {
			return fmt.Errorf("pattern %q: %v", pattern, err)
		}
		found := false
		for _, f := range funcs {
			if strings.HasPrefix(f, prefix) && re.MatchString(f) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no %s function of %s matches %q", prefix, strings.Join(r.pkgs, " "), parts[0])
		}
		if len(parts) > 1 && strings.HasSuffix(parts[1], ".yaml") {
			for _, dir := range []string{"sim/testdata/scenarios", "examples"} {
				if _, err := os.Stat(filepath.Join(root, dir, parts[1])); err == nil {
					return nil
				}
			}
			return fmt.Errorf("no scenario file %s under sim/testdata/scenarios or examples", parts[1])
		}
		return nil
	}
	if err := match(r.run, "Test"); err != nil {
		return err
	}
	return match(r.bench, "Benchmark")
}
