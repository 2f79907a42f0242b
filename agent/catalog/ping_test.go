package catalog

import (
	"strings"
	"testing"

	"github.com/nbs-project/nbs/internal/schema"
)

func TestPingSegment(t *testing.T) {
	cases := map[string]string{
		"198.18.0.2":             "198.18.0.2",
		"2001:db8::1":            "2001:db8::1",
		"Web-1.Example":          "web-1.example",
		"gw one/two":             "gw_one_two",
		"clock":                  "clock_",
		"":                       "_",
		"ünïcode":                "_n_code",
		strings.Repeat("a", 128): strings.Repeat("a", 128),
	}
	for in, want := range cases {
		if got := PingSegment(in); got != want {
			t.Errorf("PingSegment(%q) = %q, want %q", in, got, want)
		}
	}
	// Long names sharing their first 128 bytes are two targets, each
	// within a segment's 128 bytes.
	long1, long2 := strings.Repeat("a", 200)+"-1", strings.Repeat("a", 200)+"-2"
	s1, s2 := PingSegment(long1), PingSegment(long2)
	if s1 == s2 || len(s1) != 128 || len(s2) != 128 || !strings.HasPrefix(s1, strings.Repeat("a", 119)) {
		t.Errorf("long names: %q and %q; want two distinct 128-byte segments keeping the prefix", s1, s2)
	}
	if PingSegment(long1) != s1 {
		t.Error("PingSegment is not deterministic")
	}
}

// Every id of a target's subtree is one the collector accepts, for any
// target name, and the subtree never collides with ping/clock.
func TestPingTargetIDsAreValid(t *testing.T) {
	for _, name := range []string{"198.18.0.2", "2001:db8::1", "Node_A", "clock", "a b", strings.Repeat("x", 300)} {
		id := PingTargetID(name)
		if id == PingClock {
			t.Errorf("target %q takes the clock's id", name)
		}
		for _, m := range PingTarget(id, name) {
			if err := schema.CheckID(m.ID); err != nil {
				t.Errorf("target %q: id %q is not a valid metric path: %v", name, m.ID, err)
			}
			if m.Parent() != Ping && !strings.HasPrefix(m.ID, id+"/") && m.ID != id {
				t.Errorf("target %q: %q is outside its subtree", name, m.ID)
			}
			if m.Kind == Histogram && (m.Scale != 1e6 || m.Quantile != 0.99) {
				t.Errorf("%s: histogram without the ms scale and p99 headline", m.ID)
			}
		}
	}
	for _, m := range PingTree() {
		if err := schema.CheckID(m.ID); err != nil {
			t.Errorf("%q is not a valid metric path: %v", m.ID, err)
		}
	}
}
