package cgroupv2

import (
	"os"
	"testing"
)

func TestRoot(t *testing.T) {
	p, err := Root()
	if err != nil {
		t.Skipf("no cgroup v2 here: %v", err)
	}
	if _, err := os.Stat(p + "/cgroup.procs"); err != nil {
		t.Fatalf("%s is not a cgroup v2 directory: %v", p, err)
	}
	if got := unescapeMount(`/a\040b`); got != "/a b" {
		t.Errorf("unescape: %q", got)
	}
}
