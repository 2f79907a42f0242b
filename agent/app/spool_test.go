package app

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nbs-project/nbs/agent/spool"
)

// An agent whose spool directory cannot be used still runs, keeping
// reports in memory, and its spool capability says why.
func TestSpoolFallsBackToMemoryAndSaysWhy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	held, err := spool.Open(spool.Options{Dir: dir, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cases := []struct {
		dir, reason string
		persistent  bool
	}{
		{filepath.Join(t.TempDir(), "free"), "", true},
		{dir, "in use by another agent", false},
		{"", "--spool.dir is empty", false},
	}
	for _, c := range cases {
		a := New(Config{NodeName: "n1", SpoolDir: c.dir, BufferReports: 10}, slog.New(slog.DiscardHandler))
		s, capability := a.openSpool()
		if s.Persistent() != c.persistent || capability.GetName() != "spool" || capability.GetAvailable() != c.persistent ||
			!strings.Contains(capability.GetReason(), c.reason) {
			t.Errorf("--spool.dir %q: persistent %v, capability %v; want persistent %v and a reason containing %q",
				c.dir, s.Persistent(), capability, c.persistent, c.reason)
		}
		_ = s.Close()
	}
}
