package app

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// exeRSS is the resident KiB of this binary's read-only mappings.
func exeRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if _, ok := mappingRange(fields[0]); ok && len(fields) >= 5 {
			in = len(fields) >= 6 && fields[5] == exe && !strings.Contains(fields[1], "w")
			continue
		}
		if in && fields[0] == "Rss:" {
			n, _ := strconv.Atoi(fields[1])
			total += n
		}
	}
	return total
}

// TestDropTextPages checks that the binary's pages mapped so far leave its
// resident memory, and that it runs on (its pages come back from the page
// cache as it touches them).
func TestDropTextPages(t *testing.T) {
	before := exeRSS(t)
	dropTextPages()
	after := exeRSS(t)
	t.Logf("the binary's resident read-only pages: %d KiB before, %d KiB after", before, after)
	if after >= before/2 {
		t.Errorf("the binary's resident pages went from %d KiB to %d KiB, want less than half", before, after)
	}
	// Code not run since: it comes back.
	var l Labels
	if err := l.Set("rack=r12"); err != nil || l.String() != "rack=r12" {
		t.Fatalf("labels after the drop: %q, %v", l.String(), err)
	}
}
