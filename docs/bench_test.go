package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	fenceRE     = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	spanRE      = regexp.MustCompile("(?s)`([^`]*)`")
	benchFlagRE = regexp.MustCompile(`-bench\s+('[^']*'|"[^"]*"|\S+)`)
	pkgRE       = regexp.MustCompile(`(?:^|\s)(\./[A-Za-z0-9_./{},-]*)`)
	benchFuncRE = regexp.MustCompile(`(?m)^func (Benchmark[A-Za-z0-9_]*)\(`)
)

// benchCommand is one `go test -bench` command: its pattern and packages.
type benchCommand struct {
	text    string
	pattern *regexp.Regexp
	pkgs    []string
}

// benchCommands finds every `go test … -bench P … ./pkg/` in text, in code
// blocks and inline code, a command wrapped over lines included.
func benchCommands(t *testing.T, text string) []benchCommand {
	t.Helper()
	var chunks []string
	for _, m := range fenceRE.FindAllStringSubmatch(text, -1) {
		chunks = append(chunks, strings.Split(m[1], "\n")...)
	}
	for _, m := range spanRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		chunks = append(chunks, strings.ReplaceAll(m[1], "\n", " "))
	}
	var out []benchCommand
	for _, c := range chunks {
		// A line of commands joined by ; or && holds several.
		for _, cmd := range regexp.MustCompile(`;|&&`).Split(c, -1) {
			if !strings.Contains(cmd, "go test") && !strings.Contains(cmd, "$(GO) test") {
				continue
			}
			f := benchFlagRE.FindStringSubmatch(cmd)
			if f == nil {
				continue
			}
			pat := strings.Trim(f[1], `'"`)
			pat = strings.ReplaceAll(pat, "$$", "$")
			re, err := regexp.Compile(pat)
			if err != nil {
				t.Errorf("%q: -bench %q: %v", cmd, pat, err)
				continue
			}
			var pkgs []string
			for _, p := range pkgRE.FindAllStringSubmatch(cmd, -1) {
				pkgs = append(pkgs, expandBraces(strings.TrimSuffix(strings.TrimRight(p[1], ")."), "/"))...)
			}
			if len(pkgs) == 0 {
				continue // a command whose package is given in its prose
			}
			out = append(out, benchCommand{text: strings.TrimSpace(cmd), pattern: re, pkgs: pkgs})
		}
	}
	return out
}

// expandBraces expands one shell brace list: ./bench/{a,b} → ./bench/a ./bench/b.
func expandBraces(p string) []string {
	i, j := strings.Index(p, "{"), strings.Index(p, "}")
	if i < 0 || j < i {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, strings.TrimSuffix(p[:i]+alt+p[j+1:], "/"))
	}
	return out
}

// benchmarksIn lists the Benchmark functions of a package directory.
func benchmarksIn(t *testing.T, root, pkg string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, pkg, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range benchFuncRE.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// Every benchmark a BENCHMARKS.md command runs exists (a renamed or removed
// benchmark leaves a figure nobody can reproduce) and is run by `make
// bench`, the one command that reruns every figure.
func TestBenchmarkCommandsAreRunByMakeBench(t *testing.T) {
	root := ".."
	doc, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	target := regexp.MustCompile(`(?s)\nbench:[^\n]*\n(.*?)\n\n`).FindSubmatch(mk)
	if target == nil {
		t.Fatal("the Makefile has no bench target")
	}
	covered := map[string]bool{} // "pkg Benchmark"
	for _, c := range benchCommands(t, "```\n"+string(target[1])+"```") {
		for _, pkg := range c.pkgs {
			for _, name := range benchmarksIn(t, root, pkg) {
				if c.pattern.MatchString(name) {
					covered[pkg+" "+name] = true
				}
			}
		}
	}
	if len(covered) == 0 {
		t.Fatal("no benchmark found in make bench's commands")
	}
	cmds := benchCommands(t, string(doc))
	if len(cmds) < 20 {
		t.Fatalf("found only %d benchmark commands in BENCHMARKS.md", len(cmds))
	}
	for _, c := range cmds {
		for _, pkg := range c.pkgs {
			var matched []string
			for _, name := range benchmarksIn(t, root, pkg) {
				if c.pattern.MatchString(name) {
					matched = append(matched, name)
				}
			}
			if len(matched) == 0 {
				t.Errorf("BENCHMARKS.md: %q runs no benchmark in %s", c.text, pkg)
			}
			for _, name := range matched {
				if !covered[pkg+" "+name] {
					t.Errorf("BENCHMARKS.md: %s %s (%q) is not run by make bench", pkg, name, c.text)
				}
			}
		}
	}
}
