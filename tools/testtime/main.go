// Command testtime reads `go test -json` on stdin, prints the tests' output
// as go test would, and ends with the slowest packages and tests, so the
// next slowdown is seen when it lands rather than when CI nears its limit.
//
//	go test -json ./... | testtime -top 15 -save test-artifacts/go-test.json
//
// -top 0 prints no summary (one part of a longer run); -quiet prints only
// the summary, of a stream whose output was printed already.
//
// It exits 1 when a test or package failed (the caller's pipefail also
// carries go test's own status).
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type timing struct {
	name    string
	seconds float64
	failed  bool
}

func main() {
	top := flag.Int("top", 15, "how many of the slowest packages and tests to list")
	save := flag.String("save", "", "also write the raw go test -json stream to this file")
	quiet := flag.Bool("quiet", false, "print only the slowest packages and tests, not the tests' output (a stream already printed)")
	flag.Parse()
	var raw io.Writer = io.Discard
	if *save != "" {
		f, err := os.Create(*save)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtime: %v\n", err)
			os.Exit(2)
		}
		defer f.Close()
		raw = f
	}
	var out io.Writer = os.Stdout
	if *quiet {
		out = io.Discard
	}
	pkgs, tests, failed, err := run(os.Stdin, out, raw)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testtime: read go test -json: %v\n", err)
		os.Exit(2)
	}
	// -top 0: one part of a longer run, whose summary comes at its end.
	if *top > 0 {
		summary(os.Stdout, pkgs, tests, *top)
	}
	if failed {
		os.Exit(1)
	}
}

// run prints what a plain (not -v) go test prints: each package's summary
// line, and the whole output of a failing test or package, and collects
// the packages' and the top-level tests' elapsed times. Lines that are not
// JSON (a build error printed before the test binary ran) are passed
// through.
func run(in io.Reader, out, raw io.Writer) (pkgs, tests []timing, failed bool, err error) {
	type key struct{ pkg, test string }
	held := map[key]*strings.Builder{} // output not yet known to be worth printing
	hold := func(k key) *strings.Builder {
		b := held[k]
		if b == nil {
			b = &strings.Builder{}
			held[k] = b
		}
		return b
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(raw, "%s\n", line)
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			hold(k).WriteString(e.Output)
		case "build-output":
			io.WriteString(out, e.Output)
		case "build-fail":
			failed = true
		case "pass", "fail", "skip":
			t := timing{name: short(e.Package), seconds: e.Elapsed, failed: e.Action == "fail"}
			failed = failed || t.failed
			if e.Test != "" {
				if t.failed {
					io.WriteString(out, hold(k).String())
				}
				delete(held, k)
				if !strings.Contains(e.Test, "/") && e.Action != "skip" { // subtests are inside their parent's time
					t.name += " " + e.Test
					tests = append(tests, t)
				}
				continue
			}
			// The package ended: on failure everything it left unprinted
			// (a panic, a timeout's goroutine dump, tests still running).
			if t.failed {
				for hk, b := range held {
					if hk.pkg == e.Package && hk.test != "" {
						io.WriteString(out, b.String())
						delete(held, hk)
					}
				}
				io.WriteString(out, hold(k).String())
			} else {
				for _, l := range strings.SplitAfter(hold(k).String(), "\n") {
					if strings.HasPrefix(l, "ok") || strings.HasPrefix(l, "?") {
						io.WriteString(out, l)
					}
				}
			}
			delete(held, k)
			if e.Action != "skip" {
				pkgs = append(pkgs, t)
			}
		}
	}
	return pkgs, tests, failed, sc.Err()
}

func summary(w io.Writer, pkgs, tests []timing, top int) {
	var total float64
	for _, p := range pkgs {
		total += p.seconds
	}
	fmt.Fprintf(w, "\n--- slowest packages (of %d; %.0f s in all packages)\n", len(pkgs), total)
	list(w, pkgs, top)
	fmt.Fprintf(w, "--- slowest tests (of %d top-level tests)\n", len(tests))
	list(w, tests, top)
}

func list(w io.Writer, ts []timing, top int) {
	slices.SortStableFunc(ts, func(a, b timing) int { return cmp.Compare(b.seconds, a.seconds) })
	for _, t := range ts[:min(top, len(ts))] {
		mark := ""
		if t.failed {
			mark = "  FAIL"
		}
		fmt.Fprintf(w, "%8.1fs  %s%s\n", t.seconds, t.name, mark)
	}
}

// short drops the module path: e2e, collector/store.
func short(pkg string) string {
	_, rest, ok := strings.Cut(pkg, "github.com/nbs-project/nbs/")
	if !ok {
		return pkg
	}
	return rest
}
