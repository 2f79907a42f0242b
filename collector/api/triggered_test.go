package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// A triggered source the agent detached carries the agent's reason as its
// tree node's note, from its newest event; one attached again since, or
// attached all along, carries none, and no other node does.
func TestTriggeredNotes(t *testing.T) {
	now := time.Now()
	ev := func(ago time.Duration, metric, action, reason string) store.StoredEvent {
		return store.StoredEvent{Time: now.Add(-ago), Metric: metric, Fields: map[string]string{"action": action, "reason": reason}}
	}
	const overBudget = "over budget, 3.2% of a CPU vs 1% (this source 3.1%)"
	events := []store.StoredEvent{ // newest first, as Events returns them
		ev(10*time.Second, "agent/triggered/latency_rx", "detached", overBudget),
		ev(20*time.Second, "agent/triggered/latency_qdisc", "attached", "an operator expanded the node"),
		ev(30*time.Second, "agent/triggered/latency_rx", "attached", "always on"),
		ev(40*time.Second, "agent/triggered/latency_qdisc", "detached", overBudget),
		{Time: now, Metric: "agent/triggered/latency_flows", Fields: map[string]string{"saddr": "10.0.0.1"}}, // not a state
		ev(5*time.Second, "tcp_reset/sent", "detached", "not a triggered source"),
	}
	states := store.TriggeredStates(events)
	if len(states) != 2 || states[0].Metric != "agent/triggered/latency_qdisc" || !states[0].Attached ||
		states[1].Metric != "agent/triggered/latency_rx" || states[1].Attached || states[1].Note != "detached: "+overBudget {
		t.Fatalf("states %+v", states)
	}
	defs := []store.MetricDef{
		{Path: "agent", Kind: store.KindGauge},
		{Path: "agent/triggered", Kind: store.KindGauge},
		{Path: "agent/triggered/latency_qdisc", Kind: store.KindGauge},
		{Path: "agent/triggered/latency_rx", Kind: store.KindGauge},
		{Path: "tcp_reset", Kind: store.KindRate},
		{Path: "tcp_reset/sent", Kind: store.KindRate},
	}
	roots := BuildTree(defs, store.Latest{}, nil, nil)
	noteTriggered(roots, states)
	notes := map[string]string{}
	var walk func([]*TreeNode)
	walk = func(ns []*TreeNode) {
		for _, n := range ns {
			if n.Note != "" {
				notes[n.ID] = n.Note
			}
			walk(n.Children)
		}
	}
	walk(roots)
	if len(notes) != 1 || notes["agent/triggered/latency_rx"] != "detached: "+overBudget {
		t.Errorf("notes %v, want only latency_rx's detach", notes)
	}
	b, err := json.Marshal(roots)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), `"note"`) != 1 {
		t.Errorf("%d notes in the JSON, want 1 (none where there is nothing to say): %s", strings.Count(string(b), `"note"`), b)
	}
}
