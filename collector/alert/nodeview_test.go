package alert

import (
	"fmt"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// A node's view holds its newest report's states only: after a snapshot's
// full tree, the roots that follow neither keep the tree's room nor let a
// metric of the tree count toward the node's worst state.
func TestNodeViewFollowsTheNewestReport(t *testing.T) {
	e := NewEngine()
	now := time.Now()
	r := &Rule{Metric: "drops/*"}
	report := func(n int, deep store.State) []Sample {
		out := []Sample{{Path: "drops", State: store.StateOK}}
		for i := range n {
			out = append(out, Sample{Path: fmt.Sprintf("drops/m%03d", i), State: deep})
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		samples    []Sample
		worst      store.State
		roomAtMost int
	}{
		{"roots", report(0, store.StateOK), store.StateOK, 16 + 2},
		{"a snapshot's full tree", report(300, store.StateCrit), store.StateCrit, 2*301 + 16},
		{"roots again", report(0, store.StateOK), store.StateOK, 16 + 2},
		{"a few children", report(3, store.StateWarn), store.StateWarn, 2*4 + 16},
	} {
		e.setNodeView(NodeInfo{ID: 1}, now, time.Second, tc.samples)
		nv := e.nodes[1]
		if len(nv.states) != len(tc.samples) {
			t.Errorf("%s: %d states, want %d", tc.name, len(nv.states), len(tc.samples))
		}
		if c := cap(nv.states); c > tc.roomAtMost {
			t.Errorf("%s: room for %d states, want at most %d", tc.name, c, tc.roomAtMost)
		}
		if w := nv.worst(r, now); w != tc.worst {
			t.Errorf("%s: worst %v, want %v", tc.name, w, tc.worst)
		}
		for _, s := range nv.states[len(nv.states):cap(nv.states)] {
			if s.path != "" {
				t.Fatalf("%s: a state past the newest report's keeps %q", tc.name, s.path)
			}
		}
	}
}
