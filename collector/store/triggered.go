package store

import (
	"context"
	"slices"
	"strings"
	"time"
)

// TriggeredPath is the agent's subtree saying which triggered sources
// (per-packet BPF programs) are attached; each child's events say when and
// why one was attached or detached (agent/source/agent).
const TriggeredPath = "agent/triggered"

// Bounds of the read behind Triggered: a node's newest attach and detach
// events of the last day, at most this many (a node has a handful of
// triggered sources, each changing at most once per interval).
const (
	triggeredLookback = 24 * time.Hour
	triggeredEvents   = 200
)

// TriggeredState is what a node's agent last said of one triggered source.
type TriggeredState struct {
	// Metric is the source's child of agent/triggered.
	Metric   string `json:"metric"`
	Attached bool   `json:"attached"`
	// Note is the action and its reason as the agent gave them ("detached:
	// over budget, 3.2% of a CPU vs 1% (this source 3.1%)").
	Note string    `json:"note"`
	At   time.Time `json:"at"`
}

// TriggeredStates is the newest state of each triggered source among
// events (newest first, as Events returns them), by metric.
func TriggeredStates(events []StoredEvent) []TriggeredState {
	seen := map[string]bool{}
	var out []TriggeredState
	for _, e := range events {
		if seen[e.Metric] || !strings.HasPrefix(e.Metric, TriggeredPath+"/") {
			continue
		}
		action := e.Fields["action"]
		if action != "attached" && action != "detached" {
			continue
		}
		seen[e.Metric] = true
		note := action
		if r := e.Fields["reason"]; r != "" {
			note += ": " + r
		}
		if msg := e.Fields["error"]; msg != "" {
			note += " (failed: " + msg + ")"
		}
		out = append(out, TriggeredState{Metric: e.Metric, Attached: action == "attached" && e.Fields["error"] == "",
			Note: note, At: e.Time.UTC()})
	}
	slices.SortFunc(out, func(a, b TriggeredState) int { return strings.Compare(a.Metric, b.Metric) })
	return out
}

// EventReader reads a node's evidence (Store and Reads do).
type EventReader interface {
	Events(ctx context.Context, nodeID int32, path string, from, to time.Time, limit int) ([]StoredEvent, error)
}

// Triggered reads the newest state of each of a node's triggered sources
// as of now.
func Triggered(ctx context.Context, r EventReader, nodeID int32, now time.Time) ([]TriggeredState, error) {
	events, err := r.Events(ctx, nodeID, TriggeredPath, now.Add(-triggeredLookback), now.Add(time.Minute), triggeredEvents)
	if err != nil {
		return nil, err
	}
	return TriggeredStates(events), nil
}
