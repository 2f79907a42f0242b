// Package docs_test checks the documentation's relative links: every file a
// link names exists, and every #anchor it names is a heading (or an
// explicit anchor) of that file, so moving a section cannot silently break
// the way into it.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The pages checked, relative to the repository's root.
var pages = []string{"README.md", "BENCHMARKS.md", "deploy/README.md", "docs/*.md", "collector/access/README.md"}

var (
	linkRE   = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	anchorRE = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	codeRE   = regexp.MustCompile("`[^`]*`")
)

func TestRelativeLinksResolve(t *testing.T) {
	root := ".."
	var files []string
	for _, p := range pages {
		m, err := filepath.Glob(filepath.Join(root, p))
		if err != nil || len(m) == 0 {
			t.Fatalf("no page matches %s (%v)", p, err)
		}
		files = append(files, m...)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range proseLines(string(b)) {
			for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				path := f
				if file != "" {
					path = filepath.Join(filepath.Dir(f), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %s: no such file", rel(f), i+1, target)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", rel(f), i+1, target, rel(path), anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d links: is the link pattern still right?", checked)
	}
}

// proseLines are the file's lines with those inside fenced code blocks
// blanked (their brackets are code, not links), numbered as in the file.
func proseLines(s string) []string {
	lines := strings.Split(s, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors are the anchors a Markdown renderer such as GitHub's
// makes for the headings (lower case, punctuation dropped, spaces to
// hyphens, -1, -2 for repeats), and explicit <a id> anchors.
func headingAnchors(s string) map[string]bool {
	a := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(s) {
		for _, m := range anchorRE.FindAllStringSubmatch(l, -1) {
			a[m[1]] = true
		}
		if !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			a[slug+"-"+strconv.Itoa(n)] = true
		} else {
			a[slug] = true
		}
		seen[slug]++
	}
	return a
}

func rel(p string) string { return strings.TrimPrefix(filepath.ToSlash(p), "../") }
