package main

import (
	"strings"
	"testing"
)

// A stream as go test -json writes it: a passing package, a failing one
// with a failing subtest, a package without tests, and a build error.
const stream = `{"Action":"start","Package":"github.com/nbs-project/nbs/a"}
{"Action":"run","Package":"github.com/nbs-project/nbs/a","Test":"TestFast"}
{"Action":"output","Package":"github.com/nbs-project/nbs/a","Test":"TestFast","Output":"=== RUN   TestFast\n"}
{"Action":"output","Package":"github.com/nbs-project/nbs/a","Test":"TestFast","Output":"    a_test.go:9: chatter of a passing test\n"}
{"Action":"pass","Package":"github.com/nbs-project/nbs/a","Test":"TestFast","Elapsed":0.5}
{"Action":"pass","Package":"github.com/nbs-project/nbs/a","Test":"TestSlow","Elapsed":12.25}
{"Action":"output","Package":"github.com/nbs-project/nbs/a","Output":"PASS\n"}
{"Action":"output","Package":"github.com/nbs-project/nbs/a","Output":"ok  \tgithub.com/nbs-project/nbs/a\t12.8s\n"}
{"Action":"pass","Package":"github.com/nbs-project/nbs/a","Elapsed":12.8}
{"Action":"output","Package":"github.com/nbs-project/nbs/b","Test":"TestBroken","Output":"=== RUN   TestBroken\n"}
{"Action":"output","Package":"github.com/nbs-project/nbs/b","Test":"TestBroken/case","Output":"    b_test.go:3: want 1, got 2\n"}
{"Action":"fail","Package":"github.com/nbs-project/nbs/b","Test":"TestBroken/case","Elapsed":3}
{"Action":"output","Package":"github.com/nbs-project/nbs/b","Test":"TestBroken","Output":"--- FAIL: TestBroken (3.00s)\n"}
{"Action":"fail","Package":"github.com/nbs-project/nbs/b","Test":"TestBroken","Elapsed":3}
{"Action":"output","Package":"github.com/nbs-project/nbs/b","Output":"FAIL\tgithub.com/nbs-project/nbs/b\t3.1s\n"}
{"Action":"fail","Package":"github.com/nbs-project/nbs/b","Elapsed":3.1}
{"Action":"output","Package":"github.com/nbs-project/nbs/c","Output":"?   \tgithub.com/nbs-project/nbs/c\t[no test files]\n"}
{"Action":"skip","Package":"github.com/nbs-project/nbs/c","Elapsed":0}
# github.com/nbs-project/nbs/d
`

func TestRunPrintsWhatGoTestPrintsAndTimes(t *testing.T) {
	var out, raw strings.Builder
	pkgs, tests, failed, err := run(strings.NewReader(stream), &out, &raw)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("a failed test and package: want failed")
	}
	if raw.String() != stream {
		t.Error("the saved stream differs from the input")
	}
	got := out.String()
	for _, want := range []string{
		"ok  \tgithub.com/nbs-project/nbs/a\t12.8s\n",
		"    b_test.go:3: want 1, got 2\n",
		"--- FAIL: TestBroken (3.00s)\n",
		"FAIL\tgithub.com/nbs-project/nbs/b\t3.1s\n",
		"?   \tgithub.com/nbs-project/nbs/c\t[no test files]\n",
		"# github.com/nbs-project/nbs/d\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, hidden := range []string{"chatter of a passing test", "=== RUN   TestFast", "PASS\n"} {
		if strings.Contains(got, hidden) {
			t.Errorf("output shows %q, which plain go test does not:\n%s", hidden, got)
		}
	}
	if len(pkgs) != 2 || len(tests) != 3 {
		t.Fatalf("timed %d packages and %d tests, want 2 and 3 (no subtests, no skipped package): %+v %+v", len(pkgs), len(tests), pkgs, tests)
	}
	var sum strings.Builder
	summary(&sum, pkgs, tests, 1)
	for _, want := range []string{"    12.8s  a\n", "    12.2s  a TestSlow\n"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}
