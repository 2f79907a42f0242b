package report

import (
	"time"

	"github.com/nbs-project/nbs/collector/access"
)

// Report is the JSON the API serves (README, "Reports"). A pointer field
// is null when there was no data, never 0.
type Report struct {
	Period      Period    `json:"period"`
	Scope       Scope     `json:"scope"`
	ErrorBound  float64   `json:"error_bound"`
	GeneratedAt time.Time `json:"generated_at"`
	Resolution  int       `json:"resolution_seconds"`
	// DataFrom is when the data of the period starts (dataFrom), nil when
	// the nodes in scope reported nothing in it.
	DataFrom      *time.Time      `json:"data_from"`
	Ping          Ping            `json:"ping"`
	KernelLatency []KernelLatency `json:"kernel_latency"`
	Reliability   Reliability     `json:"reliability"`
	Availability  []Availability  `json:"availability"`
	// AvailabilityTimeline is each root's state over the fleet in scope,
	// per day (per hour for periods up to 2 days): what the per-node
	// Availability rows cannot show, when.
	AvailabilityTimeline []AvailabilityRoot `json:"availability_timeline"`
	Incidents            []Incident         `json:"incidents"`
	Objectives           []ObjectiveResult  `json:"objectives"`
}

type Period struct {
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	PreviousFrom time.Time `json:"previous_from"`
	PreviousTo   time.Time `json:"previous_to"`
}

type Scope struct {
	Selector access.Selector `json:"selector"`
	Nodes    []string        `json:"nodes"`
}

type Ping struct {
	Targets []PingTarget `json:"targets"`
	PerNode []PingNode   `json:"per_node"`
	Series  []PingSeries `json:"series"`
}

type PingTarget struct {
	Target string `json:"target"`
	// Nodes names the nodes that ping the target; NodeCount is how many,
	// and PerNode their numbers to this target (the drill-down): the 50
	// with the highest p99, highest first.
	Nodes        []string     `json:"nodes"`
	NodeCount    int          `json:"node_count"`
	PerNode      []PingNode   `json:"per_node"`
	P50          *float64     `json:"p50_ms"`
	P90          *float64     `json:"p90_ms"`
	P99          *float64     `json:"p99_ms"`
	Max          *float64     `json:"max_ms"`
	Sent         *int64       `json:"sent"`
	Lost         *int64       `json:"lost"`
	Loss         *float64     `json:"loss"`
	HostDelayP50 *float64     `json:"host_delay_p50_ms"`
	HostDelayP99 *float64     `json:"host_delay_p99_ms"`
	Previous     PingPrevious `json:"previous"`
}

type PingPrevious struct {
	P50  *float64 `json:"p50_ms"`
	P99  *float64 `json:"p99_ms"`
	Loss *float64 `json:"loss"`
	Sent *int64   `json:"sent"`
	Lost *int64   `json:"lost"`
}

type PingNode struct {
	Node         string   `json:"node"`
	P50          *float64 `json:"p50_ms"`
	P90          *float64 `json:"p90_ms"`
	P99          *float64 `json:"p99_ms"`
	Max          *float64 `json:"max_ms"`
	Sent         *int64   `json:"sent"`
	Lost         *int64   `json:"lost"`
	Loss         *float64 `json:"loss"`
	HostDelayP50 *float64 `json:"host_delay_p50_ms"`
	HostDelayP99 *float64 `json:"host_delay_p99_ms"`
}

type PingSeries struct {
	Target string      `json:"target"`
	Points []PingPoint `json:"points"`
}

type PingPoint struct {
	T    time.Time `json:"t"`
	P50  *float64  `json:"p50_ms"`
	P99  *float64  `json:"p99_ms"`
	Loss *float64  `json:"loss"`
}

type KernelLatency struct {
	Metric   string         `json:"metric"`
	Title    string         `json:"title"`
	Unit     string         `json:"unit"`
	P50      *float64       `json:"p50"`
	P90      *float64       `json:"p90"`
	P99      *float64       `json:"p99"`
	Max      *float64       `json:"max"`
	Count    int64          `json:"count"`
	Previous KernelPrevious `json:"previous"`
	Series   []KernelPoint  `json:"series"`
}

type KernelPrevious struct {
	P50   *float64 `json:"p50"`
	P99   *float64 `json:"p99"`
	Count *int64   `json:"count"`
}

type KernelPoint struct {
	T   time.Time `json:"t"`
	P50 *float64  `json:"p50"`
	P99 *float64  `json:"p99"`
}

type Reliability struct {
	Resets      []ReasonRow         `json:"resets"`
	Retransmits Retransmits         `json:"retransmits"`
	Drops       []ReasonRow         `json:"drops"`
	Previous    ReliabilityPrevious `json:"previous"`
}

type ReasonRow struct {
	Metric    string   `json:"metric"`
	Reason    string   `json:"reason"`
	Direction string   `json:"direction,omitempty"`
	Count     int64    `json:"count"`
	PerHour   *float64 `json:"per_hour"`
}

// Retransmits: Segments is the number of retransmitted segments;
// Per1000Segments needs the segments sent, null until agents report them.
type Retransmits struct {
	Segments        *int64   `json:"segments"`
	Per1000Segments *float64 `json:"per_1000_segments"`
	PerSecond       *float64 `json:"per_second"`
	RTOs            *int64   `json:"rtos"`
	RTOsPerSecond   *float64 `json:"rtos_per_second"`
}

type ReliabilityPrevious struct {
	Resets      *int64 `json:"resets"`
	Retransmits *int64 `json:"retransmits"`
	Drops       *int64 `json:"drops"`
}

type Availability struct {
	Node   string  `json:"node"`
	Root   string  `json:"root"`
	OK     float64 `json:"ok"`
	Warn   float64 `json:"warn"`
	Crit   float64 `json:"crit"`
	NoData float64 `json:"no_data"`
}

// Incident is a span of non-OK minutes of a root. WorstValue is of
// Metric, in Unit: the explaining child's when there is one (the loss that
// made ping WARN, not ping's own value), else the root's.
type Incident struct {
	Node       string    `json:"node"`
	Root       string    `json:"root"`
	State      string    `json:"state"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Seconds    float64   `json:"seconds"`
	Metric     string    `json:"metric"`
	WorstValue *float64  `json:"worst_value"`
	Unit       string    `json:"unit"`
	Child      *string   `json:"child"`
	// TreeURL opens the node's tree over the incident: from= five minutes
	// before its start to= its end (Unix ms, never past the report's
	// time), metric= the path WorstValue is of.
	TreeURL string `json:"tree_url"`
}

// AvailabilityRoot is one root's timeline over the nodes in scope.
type AvailabilityRoot struct {
	Root        string              `json:"root"`
	StepSeconds int                 `json:"step_seconds"`
	Points      []AvailabilityPoint `json:"points"`
}

// AvailabilityPoint is the share of node-time of [T, T+step) ∩ the period
// in each state; what no sample covered is no data.
type AvailabilityPoint struct {
	T      time.Time `json:"t"`
	OK     float64   `json:"ok"`
	Warn   float64   `json:"warn"`
	Crit   float64   `json:"crit"`
	NoData float64   `json:"no_data"`
}

type ObjectiveResult struct {
	Name        string      `json:"name"`
	Attainment  *float64    `json:"attainment"`
	Hours       int         `json:"hours"`
	NoDataHours int         `json:"no_data_hours"`
	Missed      []time.Time `json:"missed"`
}
