// Package wiretest builds reports beyond every limit in package wire, for
// the tests of how the agent cuts them up and of what a collector makes of
// the parts.
package wiretest

import (
	"fmt"
	"strings"
	"time"

	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Roots are the root metrics of an Oversized report: a Hello announcing
// only these leaves every other metric to be defined on the stream.
const (
	RootRate      = "drops"
	RootHistogram = "latency"
)

// Oversized returns a report at t that no collector with the default limits
// takes as one message: more samples, histograms and events than a report
// may carry, and more bytes than a message. Everything in it is otherwise
// valid, and its metrics form a tree under two roots, as an agent's do.
func Oversized(t time.Time) *nbsv1.Report {
	r := &nbsv1.Report{TimeUnixNano: t.UnixNano(), IntervalMs: 1000, Snapshot: true}
	for i := range wire.MaxSamples + 5000 {
		r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: fmt.Sprintf("%s/reason_%05d", RootRate, i), Value: 1, State: nbsv1.State_STATE_OK})
	}
	// Last, so that a split must move the root to the front.
	r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: RootRate, Value: 1, State: nbsv1.State_STATE_WARN})
	for i := range wire.MaxHistograms + 100 {
		r.Histograms = append(r.Histograms, &nbsv1.Histogram{MetricId: fmt.Sprintf("%s/h_%04d", RootHistogram, i),
			BucketIndex: []uint32{1, 2}, BucketCount: []uint64{1, 2}, Count: 3, Sum: 1})
	}
	// Events carry the bytes, each small enough that a part of the
	// largest size would hold more of them than a report may carry.
	for i := range 5 * wire.MaxEvents {
		r.Events = append(r.Events, &nbsv1.Event{MetricId: fmt.Sprintf("%s/reason_%05d", RootRate, i%100), TimeUnixNano: r.TimeUnixNano,
			Fields: map[string]string{"i": fmt.Sprint(i), "detail": strings.Repeat("d", 900)}})
	}
	return r
}

// Definition describes any metric of an Oversized report as an agent's
// catalogue would, with a description of some size: a stream that must
// attach many of them to a part makes it noticeably larger.
func Definition(id string) (*nbsv1.MetricDefinition, bool) {
	kind := nbsv1.MetricKind_METRIC_KIND_RATE
	if schema.Root(id) == RootHistogram {
		kind = nbsv1.MetricKind_METRIC_KIND_HISTOGRAM
	}
	return &nbsv1.MetricDefinition{Id: id, Title: id, Unit: "x/s", Kind: kind,
		Description: strings.Repeat("what it means and what to look at next. ", 8)}, true
}

// Entries names every sample, histogram and event of a report once, so
// that tests can check that parts hold exactly what the report held.
func Entries(r *nbsv1.Report) []string {
	var out []string
	for _, s := range r.GetSamples() {
		out = append(out, "s:"+s.GetMetricId())
	}
	for _, h := range r.GetHistograms() {
		out = append(out, "h:"+h.GetMetricId())
	}
	for _, e := range r.GetEvents() {
		out = append(out, "e:"+e.GetFields()["i"]+":"+e.GetMetricId())
	}
	return out
}
