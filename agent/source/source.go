// Package source defines what each branch of the agent's tree hands to the
// agent every interval, and the pieces its sources share: the environment
// every source is opened with (Env), the evidence reader (Evidence) and the
// skeleton of a triggered source (Triggered). A new branch is a package
// here whose Options embed Env, and one line in agent/app's branches.
package source

import (
	"context"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Reading is one collection from a source.
type Reading struct {
	// Metrics the source knows now (fixed ones and any discovered since).
	Metrics []catalog.Metric
	// Counters are cumulative since the source started (or since the
	// pinned maps it adopted were made, Continuing), by metric id, but for
	// the kernel's own counters, cumulative since boot (SinceBoot); the
	// agent turns them into increases.
	Counters map[string]uint64
	// Gauges are levels by metric id.
	Gauges map[string]float64
	// Histograms are distributions of this interval only (not cumulative),
	// by metric id, in the shared log-linear layout.
	Histograms map[string]*loglinear.Histogram
	// Idle lists metrics with nothing to measure this interval (the ping
	// root of a node without targets, or whose echoes were all lost): they
	// have no value of their own, yet nothing is
	// wrong, so they are OK rather than UNKNOWN (a missing source).
	Idle []string
	// Events are evidence gathered since the previous collection.
	Events []*nbsv1.Event
	// Retired lists metric ids the source stopped measuring since the
	// previous collection (a ping target removed): the agent forgets them
	// and their subtrees, so they do not linger as UNKNOWN.
	Retired []string
	// Flows are the interval's flow-map edges and AddressHolders the
	// addresses the node's owners held (agent/source/flows): not metrics
	// of the tree, they go into the report's own fields as they are.
	Flows          []*nbsv1.FlowEdge
	AddressHolders []*nbsv1.AddressHolder
}

// Source is one branch of the tree.
type Source interface {
	Name() string
	Collect(ctx context.Context) (Reading, error)
	// Capabilities say what the source can measure here, and why not.
	Capabilities() []*nbsv1.Capability
	Close() error
}

// Holding is implemented by sources that hold what they counted for a
// later report (flows: --flows.every): Release makes the next Collect hand
// everything held, for a stopping agent's last report.
type Holding interface {
	Release()
}

// Programs is implemented by sources that run BPF programs, so the agent
// can measure what each costs (the agent branch) and keep within its
// overhead budget. Keys name the attach point ("tcp_send_reset"); a source
// without programs returns nil.
type Programs interface {
	Programs() map[string]*ebpf.Program
}

// Adaptive is implemented by sources whose programs run per packet, so the
// agent attaches them only while they are needed: while a metric under
// Trigger (other than the source's own, under Branch) is WARN or CRIT, or
// an operator has expanded the node; for a bounded time; and within the
// overhead budget. While detached, a source reports no metrics under
// Branch and retires those it reported.
type Adaptive interface {
	Source
	Programs
	// Trigger is the branch whose trouble calls for this source ("latency").
	Trigger() string
	// Branch is the subtree the source measures ("latency/qdisc").
	Branch() string
	// SetActive attaches (true) or detaches (false) the per-packet programs.
	SetActive(ctx context.Context, on bool) error
	// Active says whether they are attached.
	Active() bool
}

// Standing is implemented by Adaptive sources that may want their programs
// attached all the time (latency/rx by default): while AlwaysOn, the agent
// attaches them whenever the overhead budget allows, with no trouble,
// expand or --triggered.max needed; over the budget they are detached like
// any other and tried again after a rest.
type Standing interface {
	AlwaysOn() bool
}

// Expandable is implemented by Adaptive sources that measure a sample and
// measure everything while an operator has the node expanded (latency/rx
// times 1 socket and packet in --latency.rx.sample, and every one during an
// expand): one slow socket outside the sample is what the operator may be
// looking for. The agent turns it on for the expand's duration and off
// again, and back off early when the overhead budget is exceeded with it on.
type Expandable interface {
	// SetExpanded measures everything (true) or the sample (false).
	SetExpanded(on bool) error
	// Expanded says which.
	Expanded() bool
}

// Scoped is implemented by sources whose programs are restricted to one
// namespace (--netns) yet run for every packet on the host, leaving those
// of other namespaces after their first test. RunsInScope counts, by the
// keys of Programs, the cumulative runs that passed it, so the overhead
// budget charges the source for its own work only (the kernel's run-time
// statistics count every run). nil when the source does not count them.
type Scoped interface {
	RunsInScope() (map[string]uint64, error)
}
