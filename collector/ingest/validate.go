package ingest

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// MaxHistogramSpan bounds how far back a histogram's accumulated counts may
// reach (Histogram.start_unix_nano): an agent flushes them at least with
// every snapshot, and --snapshot.every is at most this long.
const MaxHistogramSpan = 24 * time.Hour

// Limits bound what one agent may send. Everything beyond them is refused
// with a message that names the limit, never truncated silently.
type Limits struct {
	MaxMetrics      int // definitions per node, cumulative across Hellos and streams
	MaxCapabilities int // capabilities per Hello
	MaxStreams      int // concurrent streams on this collector, Hello or not
	MaxStreamsPerIP int // concurrent streams from one source address
	MaxNodes        int // registered nodes; a new node beyond it is refused
	// MaxNodesPerTenant is a tenant's registered nodes, unless an
	// operator set its quota (nbs-collector nodes quota); 0: no quota.
	MaxNodesPerTenant int
	MaxSamples        int           // samples per report
	MaxHistograms     int           // histograms per report
	MaxBuckets        int           // buckets per histogram
	MaxEvents         int           // events per report
	MaxEventFields    int           // fields per event
	MaxFlowEdges      int           // flow edges per report, other edges included
	MaxAddressHolders int           // address holders per report
	MaxStringLen      int           // any field or text value (labels follow schema's limits)
	MaxFutureSkew     time.Duration // how far ahead of the collector's clock a report may be
	MaxAge            time.Duration // how old a resent report may be (the retention)
	MinInterval       time.Duration
	MaxInterval       time.Duration
	MaxAbsoluteValue  float64
}

func DefaultLimits() Limits {
	return Limits{
		MaxMetrics: 20000, MaxCapabilities: 256, MaxStreams: 10000, MaxStreamsPerIP: 64, MaxNodes: 10000,
		MaxSamples: wire.MaxSamples, MaxHistograms: wire.MaxHistograms, MaxBuckets: 4096,
		MaxEvents: wire.MaxEvents, MaxEventFields: 32, MaxStringLen: 4096,
		MaxFlowEdges: wire.MaxFlowEdges, MaxAddressHolders: wire.MaxAddressHolders,
		MaxFutureSkew: 10 * time.Minute, MaxAge: 30 * 24 * time.Hour,
		MinInterval: 100 * time.Millisecond, MaxInterval: time.Hour,
		MaxAbsoluteValue: 1e18,
	}
}

// rejection is a validation failure with a low-cardinality reason for the
// rejects metric and a message for the agent's operator.
type rejection struct {
	reason string
	msg    string
}

func (r *rejection) Error() string { return r.msg }

func reject(reason, format string, args ...any) *rejection {
	return &rejection{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// checkText refuses what PostgreSQL cannot store in text or jsonb (NUL,
// invalid UTF-8): stored, it would fail the whole batch with an SQL error
// the agent can do nothing about.
func checkText(field, s string, maxLen int) error {
	switch {
	case len(s) > maxLen:
		return fmt.Errorf("%s is %d bytes, at most %d allowed", field, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte", field)
	}
	return nil
}

// checkHello validates a Hello and converts it.
func (l Limits) checkHello(h *nbsv1.Hello) (store.Node, []store.MetricDef, *rejection) {
	var n store.Node
	if err := schema.CheckNodeName(h.GetNodeName()); err != nil {
		return n, nil, reject("bad_hello", "hello: node_name %.256q: %v", h.GetNodeName(), err)
	}
	if err := schema.CheckLabels(h.GetLabels()); err != nil {
		return n, nil, reject("bad_hello", "hello: %v", err)
	}
	if h.GetInstanceId() == 0 {
		return n, nil, reject("bad_hello", "hello: instance_id must be set (a random number chosen at agent start)")
	}
	if iv := time.Duration(h.GetIntervalMs()) * time.Millisecond; iv < l.MinInterval || iv > l.MaxInterval {
		return n, nil, reject("bad_hello", "hello: interval_ms %d outside [%d, %d]", h.GetIntervalMs(), l.MinInterval.Milliseconds(), l.MaxInterval.Milliseconds())
	}
	if len(h.GetMetrics()) > l.MaxMetrics {
		return n, nil, reject("too_many_metrics", "hello: %d metric definitions, at most %d allowed", len(h.GetMetrics()), l.MaxMetrics)
	}
	if err := checkText("agent_version", h.GetAgentVersion(), l.MaxStringLen); err != nil {
		return n, nil, reject("bad_string", "hello: %v", err)
	}
	if err := checkText("kernel_release", h.GetKernelRelease(), l.MaxStringLen); err != nil {
		return n, nil, reject("bad_string", "hello: %v", err)
	}
	if len(h.GetCapabilities()) > l.MaxCapabilities {
		return n, nil, reject("too_many_capabilities", "hello: %d capabilities, at most %d allowed", len(h.GetCapabilities()), l.MaxCapabilities)
	}
	pingAddr, err := checkPingAddress(h.GetPingAddress())
	if err != nil {
		return n, nil, reject("bad_hello", "hello: ping_address %.64q: %v", h.GetPingAddress(), err)
	}
	n = store.Node{
		Name: schema.CanonicalNodeName(h.GetNodeName()), Labels: h.GetLabels(), AgentVersion: h.GetAgentVersion(),
		KernelRelease: h.GetKernelRelease(), InstanceID: h.GetInstanceId(), IntervalMS: h.GetIntervalMs(),
		PingAddress: pingAddr,
	}
	for _, c := range h.GetCapabilities() {
		if c.GetName() == "" {
			return n, nil, reject("bad_hello", "hello: a capability has no name")
		}
		if err := checkText("capability name", c.GetName(), 128); err != nil {
			return n, nil, reject("bad_string", "hello: %.140q: %v", c.GetName(), err)
		}
		if err := checkText("capability "+c.GetName()+" reason", c.GetReason(), l.MaxStringLen); err != nil {
			return n, nil, reject("bad_string", "hello: %v", err)
		}
		n.Capabilities = append(n.Capabilities, store.Capability{Name: c.GetName(), Available: c.GetAvailable(), Reason: c.GetReason()})
	}
	defs, rej := l.checkDefinitions(h.GetMetrics(), &metricSet{})
	if rej != nil {
		reason := "bad_hello"
		if rej.reason == "bad_string" {
			reason = rej.reason
		}
		return n, nil, reject(reason, "hello: %s", rej.msg)
	}
	return n, defs, nil
}

// checkPingAddress accepts an empty address (not a ping peer) or a unicast
// IP other nodes can ping; it returns the canonical form.
func checkPingAddress(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("not an IP address")
	case a.Zone() != "":
		return "", fmt.Errorf("a scoped address (%%zone) means nothing to other nodes")
	case a.IsUnspecified(), a.IsMulticast(), a.IsLoopback():
		return "", fmt.Errorf("must be a unicast, non-loopback address")
	}
	return a.Unmap().String(), nil
}

// checkDefinitions validates new metric definitions against those already
// known on the stream; every non-root metric's parent must be defined.
func (l Limits) checkDefinitions(in []*nbsv1.MetricDefinition, known *metricSet) ([]store.MetricDef, *rejection) {
	batch := make(map[string]bool, len(in))
	for _, d := range in {
		if batch[d.GetId()] {
			return nil, reject("bad_definition", "metric %.256q is defined twice", d.GetId())
		}
		batch[d.GetId()] = true
	}
	defs := make([]store.MetricDef, 0, len(in))
	for _, d := range in {
		p := d.GetId()
		if err := schema.CheckID(p); err != nil {
			return nil, reject("bad_definition", "metric id %.256q must be a lower-case path like tcp_reset/sent/no_socket: %v", p, err)
		}
		if parent := schema.Parent(p); parent != "" && !batch[parent] && !known.has(parent) {
			return nil, reject("bad_definition", "metric %s: parent %s is not defined", p, parent)
		}
		if d.GetKind() < nbsv1.MetricKind_METRIC_KIND_RATE || d.GetKind() > nbsv1.MetricKind_METRIC_KIND_HISTOGRAM {
			return nil, reject("bad_definition", "metric %s: kind %v is not rate, gauge or histogram", p, d.GetKind())
		}
		if d.GetTitle() == "" {
			return nil, reject("bad_definition", "metric %s: title must not be empty", p)
		}
		for _, f := range []struct {
			name, v string
			max     int
		}{{"title", d.GetTitle(), 256}, {"unit", d.GetUnit(), 64}, {"description", d.GetDescription(), l.MaxStringLen}} {
			if err := checkText(f.name, f.v, f.max); err != nil {
				return nil, reject("bad_string", "metric %s: %v", p, err)
			}
		}
		scale, q := d.GetScale(), d.GetQuantile()
		if scale == 0 {
			scale = 1
		}
		if math.IsNaN(scale) || math.IsInf(scale, 0) || scale <= 0 || math.IsNaN(q) || q < 0 || q > 1 {
			return nil, reject("bad_definition", "metric %s: scale must be a positive number and quantile within [0, 1]", p)
		}
		def := store.MetricDef{Path: p, Title: d.GetTitle(), Unit: d.GetUnit(), Kind: store.Kind(d.GetKind()), Description: d.GetDescription(),
			Scale: scale, Quantile: q}
		if t := d.GetDefaultThreshold(); t != nil {
			thr, err := ThresholdFromProto(t)
			if err != nil {
				return nil, reject("bad_definition", "metric %s: default threshold: %v", p, err)
			}
			def.DefaultThreshold = &thr
		}
		defs = append(defs, def)
	}
	return defs, nil
}

// ThresholdFromProto validates a wire threshold.
func ThresholdFromProto(t *nbsv1.Threshold) (store.Threshold, error) {
	thr := store.Threshold{Warn: t.GetWarn(), Crit: t.GetCrit(), HoldIntervals: t.GetHoldIntervals(), BaselineIntervals: t.GetBaselineIntervals(), Floor: t.GetFloor()}
	switch t.GetComparison() {
	case nbsv1.Comparison_COMPARISON_ABOVE:
		thr.Comparison = "above"
	case nbsv1.Comparison_COMPARISON_BELOW:
		thr.Comparison = "below"
	default:
		return thr, fmt.Errorf("comparison must be above or below")
	}
	return thr, ValidateThreshold(thr)
}

// ValidateThreshold checks levels are finite, ordered for the comparison, and
// the hold and baseline windows are bounded.
func ValidateThreshold(t store.Threshold) error {
	if math.IsNaN(t.Warn) || math.IsInf(t.Warn, 0) || math.IsNaN(t.Crit) || math.IsInf(t.Crit, 0) {
		return fmt.Errorf("warn and crit must be finite numbers")
	}
	switch t.Comparison {
	case "above":
		if t.Warn > t.Crit {
			return fmt.Errorf("warn (%g) must not be above crit (%g) when the comparison is above", t.Warn, t.Crit)
		}
	case "below":
		if t.Warn < t.Crit {
			return fmt.Errorf("warn (%g) must not be below crit (%g) when the comparison is below", t.Warn, t.Crit)
		}
	default:
		return fmt.Errorf("comparison %q must be above or below", t.Comparison)
	}
	if t.HoldIntervals > 1000 {
		return fmt.Errorf("hold_intervals %d is more than 1000", t.HoldIntervals)
	}
	if t.BaselineIntervals > 10000 {
		return fmt.Errorf("baseline_intervals %d is more than 10000", t.BaselineIntervals)
	}
	if math.IsNaN(t.Floor) || math.IsInf(t.Floor, 0) || t.Floor < 0 {
		return fmt.Errorf("floor must be a finite number >= 0")
	}
	if t.Floor > 0 && t.BaselineIntervals == 0 {
		return fmt.Errorf("floor applies to baseline thresholds only: set baseline_intervals too")
	}
	if t.BaselineIntervals > 0 && (t.Warn <= 0 || t.Crit <= 0) {
		return fmt.Errorf("baseline thresholds are multiples of the baseline and must be > 0")
	}
	return nil
}

// maxScanned is how many samples a report may have for checkReport to
// find a metric twice by looking among those before it, not in a map.
const maxScanned = 32

// checkReport validates a report against the stream's state and converts it.
// It does not change the stream: the caller commits new definitions and the
// sequence only once the report is accepted.
func (l Limits) checkReport(r *nbsv1.Report, st *stream, now time.Time) (store.Report, []store.MetricDef, *rejection) {
	return l.checkReportInto(r, st, now, nil, nil)
}

// checkReportInto is checkReport with seen, an empty map the caller keeps,
// as its room for finding a metric twice in a report of more than
// maxScanned samples (nil: one is made), and arr, the arrays to fill
// (nil: new ones). The caller then holds arr with the report (hold).
func (l Limits) checkReportInto(r *nbsv1.Report, st *stream, now time.Time, seen map[string]bool, arr *reportArrays) (store.Report, []store.MetricDef, *rejection) {
	if arr == nil {
		arr = new(reportArrays)
	}
	var out store.Report
	if r.GetSequence() == 0 {
		return out, nil, reject("bad_sequence", "report: sequence must start at 1")
	}
	if r.GetSequence() <= st.lastSeq {
		return out, nil, reject("sequence_backwards", "report %d: sequence went backwards (last on this stream was %d)", r.GetSequence(), st.lastSeq)
	}
	ts := time.Unix(0, r.GetTimeUnixNano())
	if ts.After(now.Add(l.MaxFutureSkew)) {
		return out, nil, reject("bad_time", "report %d: time %s is %s ahead of the collector's clock (max %s): check the node's clock sync",
			r.GetSequence(), ts.UTC().Format(time.RFC3339), ts.Sub(now).Round(time.Second), l.MaxFutureSkew)
	}
	if ts.Before(now.Add(-l.MaxAge)) {
		return out, nil, reject("bad_time", "report %d: time %s is older than the retention (%s)", r.GetSequence(), ts.UTC().Format(time.RFC3339), l.MaxAge)
	}
	if iv := time.Duration(r.GetIntervalMs()) * time.Millisecond; iv < l.MinInterval || iv > l.MaxInterval {
		return out, nil, reject("bad_interval", "report %d: interval_ms %d outside [%d, %d]", r.GetSequence(), r.GetIntervalMs(), l.MinInterval.Milliseconds(), l.MaxInterval.Milliseconds())
	}
	switch {
	case len(r.GetSamples()) > l.MaxSamples:
		return out, nil, reject("too_large", "report %d: %d samples, at most %d allowed", r.GetSequence(), len(r.GetSamples()), l.MaxSamples)
	case len(r.GetEvents()) > l.MaxEvents:
		return out, nil, reject("too_large", "report %d: %d events, at most %d allowed", r.GetSequence(), len(r.GetEvents()), l.MaxEvents)
	case len(r.GetHistograms()) > l.MaxHistograms:
		return out, nil, reject("too_large", "report %d: %d histograms, at most %d allowed", r.GetSequence(), len(r.GetHistograms()), l.MaxHistograms)
	case st.metrics.len()+int(st.otherDefs)+len(r.GetNewMetrics()) > l.MaxMetrics:
		return out, nil, reject("too_many_metrics", "report %d: node would have more than %d metric definitions (%d defined so far, counting earlier streams)", r.GetSequence(), l.MaxMetrics, st.metrics.len()+int(st.otherDefs))
	}
	// Most reports define nothing new: no definitions to check, and no
	// map of them made for every report.
	var newDefs []store.MetricDef
	var pending map[string]store.Kind
	if len(r.GetNewMetrics()) > 0 {
		var rej *rejection
		if newDefs, rej = l.checkDefinitions(r.GetNewMetrics(), &st.metrics); rej != nil {
			return out, nil, reject(rej.reason, "report %d: %s", r.GetSequence(), rej.msg)
		}
		pending = make(map[string]store.Kind, len(newDefs))
		for _, d := range newDefs {
			pending[d.Path] = d.Kind
		}
	}
	kindOf := func(path string) (store.Kind, bool) {
		if m, ok := st.metrics.get(path); ok {
			return m.kind, true
		}
		k, ok := pending[path]
		return k, ok
	}

	out = store.Report{InstanceID: st.node.InstanceID, Seq: r.GetSequence(), Time: ts, IntervalMS: r.GetIntervalMs(), Snapshot: r.GetSnapshot(),
		Samples: room(arr.samples, len(r.GetSamples())), Histograms: room(arr.hists, len(r.GetHistograms()))}
	// The histograms' buckets in two arrays for the report rather than two
	// a histogram: a full tree's 50 histograms were 100 allocations.
	var buckets int
	for _, h := range r.GetHistograms() {
		buckets += len(h.GetBucketIndex())
	}
	arr.indexes, arr.counts = room(arr.indexes, buckets), room(arr.counts, buckets)
	indexes, counts := arr.indexes, arr.counts
	// A metric twice: looked for among the samples before it while they
	// are few (a healthy node's dozen roots), in a map beyond.
	switch {
	case len(r.GetSamples()) <= maxScanned:
		seen = nil
	case seen == nil:
		seen = make(map[string]bool, len(r.GetSamples()))
	}
	for _, s := range r.GetSamples() {
		p := s.GetMetricId()
		kind, ok := kindOf(p)
		if !ok {
			return out, nil, reject("unknown_metric", "report %d: unknown metric %q (not in the hello or new_metrics)", r.GetSequence(), p)
		}
		if seen != nil && seen[p] || seen == nil && slices.ContainsFunc(out.Samples, func(s store.Sample) bool { return s.Path == p }) {
			return out, nil, reject("bad_value", "report %d: metric %s appears twice", r.GetSequence(), p)
		}
		if seen != nil {
			seen[p] = true
		}
		v := s.GetValue()
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > l.MaxAbsoluteValue {
			return out, nil, reject("bad_value", "report %d: metric %s: value %g is not a finite number below %g", r.GetSequence(), p, v, l.MaxAbsoluteValue)
		}
		if kind == store.KindRate && v < 0 {
			return out, nil, reject("bad_value", "report %d: metric %s: a rate's increase cannot be negative (%g)", r.GetSequence(), p, v)
		}
		if s.GetState() < nbsv1.State_STATE_OK || s.GetState() > nbsv1.State_STATE_UNKNOWN {
			return out, nil, reject("bad_value", "report %d: metric %s: state %v is not OK, WARN, CRIT or UNKNOWN", r.GetSequence(), p, s.GetState())
		}
		if s.GetNoValue() {
			v = 0 // whatever came with it means nothing
		}
		out.Samples = append(out.Samples, store.Sample{Path: p, Value: v, State: store.State(s.GetState()), NoValue: s.GetNoValue(), Counter: kind == store.KindRate})
	}
	for _, h := range r.GetHistograms() {
		p := h.GetMetricId()
		if kind, ok := kindOf(p); !ok || kind != store.KindHistogram {
			return out, nil, reject("unknown_metric", "report %d: histogram for %q, which is not a defined histogram metric", r.GetSequence(), p)
		}
		idx, cnt := h.GetBucketIndex(), h.GetBucketCount()
		if len(idx) != len(cnt) || len(idx) > l.MaxBuckets {
			return out, nil, reject("bad_histogram", "report %d: histogram %s: %d indexes and %d counts (must be equal and at most %d)", r.GetSequence(), p, len(idx), len(cnt), l.MaxBuckets)
		}
		if len(idx) == 0 {
			return out, nil, reject("bad_histogram", "report %d: histogram %s is empty (no buckets): leave it out instead", r.GetSequence(), p)
		}
		var total uint64
		at := len(indexes) // the arrays hold every histogram's: never past their capacity
		indexes, counts = indexes[:at+len(idx)], counts[:at+len(idx)]
		// Full slice expressions: appending to one histogram's buckets
		// must never write into the next one's.
		hist := store.Histogram{Path: p, Count: h.GetCount(), Sum: h.GetSum(),
			BucketIndex: indexes[at : at+len(idx) : at+len(idx)], BucketCount: counts[at : at+len(idx) : at+len(idx)]}
		for i := range idx {
			if i > 0 && idx[i] <= idx[i-1] {
				return out, nil, reject("bad_histogram", "report %d: histogram %s: bucket indexes must be strictly increasing", r.GetSequence(), p)
			}
			if idx[i] >= loglinear.Buckets {
				return out, nil, reject("bad_histogram", "report %d: histogram %s: bucket index %d is past the layout (at most %d)", r.GetSequence(), p, idx[i], loglinear.Buckets-1)
			}
			if cnt[i] == 0 || cnt[i] > math.MaxInt64 || total+cnt[i] < total || total+cnt[i] > math.MaxInt64 {
				return out, nil, reject("bad_histogram", "report %d: histogram %s: bucket %d count %d is zero or overflows the total", r.GetSequence(), p, idx[i], cnt[i])
			}
			hist.BucketIndex[i], hist.BucketCount[i] = int32(idx[i]), int64(cnt[i])
			total += cnt[i]
		}
		if total != h.GetCount() {
			return out, nil, reject("bad_histogram", "report %d: histogram %s: count %d does not equal the bucket total %d", r.GetSequence(), p, h.GetCount(), total)
		}
		if math.IsNaN(h.GetSum()) || math.IsInf(h.GetSum(), 0) || h.GetSum() < 0 {
			return out, nil, reject("bad_histogram", "report %d: histogram %s: sum %g is not a finite number >= 0", r.GetSequence(), p, h.GetSum())
		}
		if start := h.GetStartUnixNano(); start != 0 {
			// Accumulated counts of a child the agent did not stream: the
			// span must end where this report's interval begins or later,
			// and not reach back further than MaxHistogramSpan.
			st := time.Unix(0, start)
			if !st.Before(ts) || ts.Sub(st) > MaxHistogramSpan {
				return out, nil, reject("bad_histogram", "report %d: histogram %s: start_unix_nano %d is not within %s before the report's time", r.GetSequence(), p, start, MaxHistogramSpan)
			}
			hist.Start = st
		}
		out.Histograms = append(out.Histograms, hist)
	}
	for _, e := range r.GetEvents() {
		p := e.GetMetricId()
		if _, ok := kindOf(p); !ok {
			return out, nil, reject("unknown_metric", "report %d: event for unknown metric %q", r.GetSequence(), p)
		}
		if len(e.GetFields()) > l.MaxEventFields {
			return out, nil, reject("too_large", "report %d: event with %d fields, at most %d allowed", r.GetSequence(), len(e.GetFields()), l.MaxEventFields)
		}
		for k, v := range e.GetFields() {
			if k == "" {
				return out, nil, reject("bad_string", "report %d: event of %s: a field has an empty key", r.GetSequence(), p)
			}
			if err := checkText("event field key", k, 64); err != nil {
				return out, nil, reject("bad_string", "report %d: event of %s: %.80q: %v", r.GetSequence(), p, k, err)
			}
			if err := checkText("event field "+k, v, l.MaxStringLen); err != nil {
				return out, nil, reject("bad_string", "report %d: event of %s: %v", r.GetSequence(), p, err)
			}
		}
		et := time.Unix(0, e.GetTimeUnixNano())
		if et.Before(now.Add(-l.MaxAge)) || et.After(now.Add(l.MaxFutureSkew)) {
			et = ts // keep the evidence, at the report's time, rather than refuse a report for a bad event clock
		}
		out.Events = append(out.Events, store.Event{Path: p, Time: et, Fields: e.GetFields()})
	}
	if rej := l.checkFlows(r, &out); rej != nil {
		return out, nil, rej
	}
	return out, newDefs, nil
}
