// Package store is the collector's PostgreSQL system of record: nodes and
// their metric definitions, reports (samples, histograms, evidence) written
// idempotently in COPY batches, and the read side for the API.
package store

import (
	"time"
	"unsafe"

	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// State is a metric's health; the numbers match nbs.v1.State so they can be
// stored and compared without translation tables.
type State int16

const (
	StateUnspecified State = 0
	StateOK          State = 1
	StateWarn        State = 2
	StateCrit        State = 3
	StateUnknown     State = 4
)

func (s State) String() string {
	switch s {
	case StateOK:
		return "ok"
	case StateWarn:
		return "warn"
	case StateCrit:
		return "crit"
	case StateUnknown:
		return "unknown"
	}
	return "unspecified"
}

// Severity orders states for "worst of" (schema.Severity): OK < UNKNOWN <
// WARN < CRIT.
func (s State) Severity() int { return schema.Severity(nbsv1.State(s)) }

// Worse returns the more severe of two states.
func Worse(a, b State) State { return State(schema.Worse(nbsv1.State(a), nbsv1.State(b))) }

// Kind is how a metric's value is to be read.
type Kind int16

const (
	KindUnspecified Kind = 0
	KindRate        Kind = 1 // stored value is the counter's increase over the interval
	KindGauge       Kind = 2
	KindHistogram   Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindRate:
		return "rate"
	case KindGauge:
		return "gauge"
	case KindHistogram:
		return "histogram"
	}
	return "unspecified"
}

// Threshold mirrors nbs.v1.Threshold in the shape stored as JSON.
type Threshold struct {
	Warn              float64 `json:"warn"`
	Crit              float64 `json:"crit"`
	Comparison        string  `json:"comparison"` // "above" or "below"
	HoldIntervals     uint32  `json:"hold_intervals"`
	BaselineIntervals uint32  `json:"baseline_intervals,omitempty"`
	Floor             float64 `json:"floor,omitempty"`
}

type Capability struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

type Node struct {
	ID            int32
	Name          string
	Labels        map[string]string
	AgentVersion  string
	KernelRelease string
	InstanceID    uint64
	IntervalMS    uint32
	Capabilities  []Capability
	FirstSeen     time.Time
	LastHello     time.Time
	// PingAddress is where other nodes ping this one ("" = not a peer).
	PingAddress string
	// Tenant is the value of the tenant label (collector/tenant) in
	// Labels, "" for none. A Hello whose tenant differs from the current
	// row's starts a new row (UpsertNode), so history stays with its tenant.
	Tenant string
	// Retired is when this row stopped being the name's current one
	// because its tenant changed; nil for the current row.
	Retired *time.Time
	// ClaimedLabels are labels the last Hello claimed for keys bound
	// server-side, where they differ from the bound ones (which won).
	ClaimedLabels map[string]string
}

type MetricDef struct {
	Path             string
	Title            string
	Unit             string
	Kind             Kind
	Description      string
	DefaultThreshold *Threshold
	Scale            float64 // histograms: recorded value / Scale is in Unit
	Quantile         float64 // histograms: the headline quantile
}

type Sample struct {
	MetricID int32
	Path     string
	Value    float64
	State    State
	// NoValue: the agent had no value (Value is 0 and means nothing); the
	// sample is there for its state. History keeps the difference: reports
	// store NaN for it (ingest refuses NaN from an agent, so NaN in
	// reports.vals means nothing else), and a rollup counts its interval in
	// its state but not in n, sum, min or max (see SampleAgg).
	NoValue bool
	// Counter: the metric is a rate, so Value is an increase that
	// WriteReports adds to the metric's running total (export_counters,
	// migration 027). Ingest sets it from the metric's definition.
	Counter bool
}

type Histogram struct {
	MetricID    int32
	Path        string
	Count       uint64
	Sum         float64
	BucketIndex []int32
	BucketCount []int64
	// Start is where the span of accumulated counts begins
	// (Histogram.start_unix_nano); zero for the report's own interval.
	Start time.Time
}

type Event struct {
	MetricID int32
	Path     string
	Time     time.Time
	Fields   map[string]string
}

// Report is one agent report, with metric paths already resolved to ids.
type Report struct {
	NodeID     int32
	InstanceID uint64
	Seq        uint64
	Time       time.Time
	// Received is the collector's clock when the report arrived (zero in
	// tests that do not care). What a client's clock may move — the
	// node's latest values — is clamped to it; Time is stored as sent.
	Received   time.Time
	IntervalMS uint32
	Snapshot   bool
	Samples    []Sample
	Histograms []Histogram
	Events     []Event
	// Flows and Holders are the report's flow map (flowwrite.go).
	Flows   []FlowEdge
	Holders []AddressHolder
}

// ReportKey identifies a report for deduplication.
type ReportKey struct {
	NodeID     int32
	InstanceID uint64
	Seq        uint64
}

func (r *Report) Key() ReportKey { return ReportKey{r.NodeID, r.InstanceID, r.Seq} }

// OrderTime is the report's time for everything ordered by it: its own
// time, but never later than when the collector received it, so a node
// whose clock runs ahead cannot hide the reports after it.
func (r *Report) OrderTime() time.Time {
	if !r.Received.IsZero() && r.Time.After(r.Received) {
		return r.Received
	}
	return r.Time
}

// LatestValue is the newest value of one metric of a node.
type LatestValue struct {
	Value float64 `json:"v"`
	State State   `json:"s"`
	// Unix milliseconds of the report that carried it.
	TimeMS int64 `json:"t"`
	// Report interval, to turn a rate's increase into a per-second value.
	IntervalMS uint32 `json:"i"`
	// NoValue: the report carried the metric for its state only.
	NoValue bool `json:"n,omitempty"`
}

// Latest is a node's newest state: every metric's newest value, and when the
// node last reported at all.
type Latest struct {
	Time       time.Time
	IntervalMS uint32
	SnapshotAt time.Time
	Metrics    map[string]LatestValue
}

// Bytes estimates the memory a report holds (its samples, histograms,
// events, flow edges and address holders, paths as sent, not interned): what the writer's queue and the
// alert hand-over bound.
func (r *Report) Bytes() int64 {
	n := int64(unsafe.Sizeof(*r))
	for _, s := range r.Samples {
		n += int64(unsafe.Sizeof(s)) + int64(len(s.Path))
	}
	for _, h := range r.Histograms {
		n += int64(unsafe.Sizeof(h)) + int64(len(h.Path)) + 12*int64(len(h.BucketIndex))
	}
	for _, e := range r.Events {
		n += int64(unsafe.Sizeof(e)) + int64(len(e.Path))
		for k, v := range e.Fields {
			n += 48 + int64(len(k)+len(v)) // map slot and string headers
		}
	}
	for _, f := range r.Flows {
		n += int64(unsafe.Sizeof(f)) + int64(len(f.Local.ID)+len(f.Local.Kind)+len(f.Local.Name)+len(f.Local.Workload)+
			len(f.LocalAddr)+len(f.PeerAddr)+len(f.XlatAddr))
		for _, m := range []map[string]uint64{f.ResetsSent, f.ResetsRecv, f.Drops} {
			for k := range m {
				n += 48 + int64(len(k))
			}
		}
		n += 48 * int64(len(f.RTT))
	}
	for _, h := range r.Holders {
		n += int64(unsafe.Sizeof(h)) + int64(len(h.Address)+len(h.Owner.ID)+len(h.Owner.Kind)+len(h.Owner.Name)+len(h.Owner.Workload))
	}
	return n
}
