package uplink

import (
	"log/slog"
	"slices"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// What the collector accepts. The Config message does not carry its limits,
// so these mirror its defaults: MaxMessageBytes is collector/app's
// --grpc.max-message-bytes, the others collector/ingest's DefaultLimits
// (MaxSamples, MaxHistograms, MaxEvents per report). A message over them
// ends the stream or is rejected, and resending it would stop every report
// behind it.
const (
	MaxMessageBytes = 4 << 20
	MaxSamples      = 20000
	MaxHistograms   = 2000
	MaxEvents       = 1000
)

// partBytes is the most one report may encode to, counting the definitions
// a stream may have to attach to it. A quarter of MaxMessageBytes leaves room
// for a collector configured below its default, and keeps the rows a report
// becomes of a reasonable size.
const partBytes = MaxMessageBytes / 4

// reportOverhead covers a report's own fields (sequence, time, interval,
// snapshot flag) and the ConnectRequest around it, generously.
const reportOverhead = 64

// Outbox holds reports until the collector acks them, in a spool that may be
// on disk. It gives each report its sequence, splitting one the collector
// could not take into several with consecutive sequences, so that nothing
// it holds is undeliverable.
type Outbox struct {
	spool      *spool.Spool
	definition func(id string) (*nbsv1.MetricDefinition, bool)
	log        *slog.Logger
	dropped    atomic.Uint64 // entries too large to send on their own
}

// NewOutbox keeps reports in sp. definition gives the definition of a metric
// the agent knows, recorded in the spool with the reports that use it.
func NewOutbox(sp *spool.Spool, definition func(id string) (*nbsv1.MetricDefinition, bool), log *slog.Logger) *Outbox {
	if definition == nil {
		definition = func(string) (*nbsv1.MetricDefinition, bool) { return nil, false }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Outbox{spool: sp, definition: definition, log: log}
}

// Add stores a report (split when it is too large to send as one), giving
// it the next sequence(s). The report's own Sequence is ignored.
func (o *Outbox) Add(r *nbsv1.Report) {
	o.spool.Define(o.idsOf(r), o.definition)
	o.spool.Append(o.split(r)...)
}

// Instance is the instance id the outbox's sequences belong to.
func (o *Outbox) Instance() uint64 { return o.spool.Instance() }

// Ack forgets the report with this sequence.
func (o *Outbox) Ack(seq uint64) { o.spool.Ack(seq) }

// Discard forgets a report that will never be stored, counting it as dropped.
func (o *Outbox) Discard(seq uint64) { o.spool.Discard(seq) }

// After returns reports with a sequence above seq, in order and a few MiB at
// a time, and a channel that is closed when there are more to read.
func (o *Outbox) After(seq uint64) ([]*nbsv1.Report, <-chan struct{}) {
	return o.spool.After(seq, MaxMessageBytes)
}

// Definition returns the recorded definition of a metric some held report
// uses, for a replay the current agent cannot describe itself.
func (o *Outbox) Definition(id string) (*nbsv1.MetricDefinition, bool) { return o.spool.Definition(id) }

// Len is the number of un-acked reports.
func (o *Outbox) Len() int { return o.spool.Len() }

// Dropped counts the samples, histograms and events lost: given up by the
// spool's bounds, rejected by the collector, or too large to send at all.
func (o *Outbox) Dropped() uint64 { return o.spool.Dropped() + o.dropped.Load() }

// split cuts a report into parts the collector accepts: within its per-report
// counts and, with every definition a stream might attach, within partBytes.
// Roots go first, so the first part carries them all. An entry too large on
// its own is dropped, logged and counted.
func (o *Outbox) split(r *nbsv1.Report) []*nbsv1.Report {
	if len(r.GetSamples()) <= MaxSamples && len(r.GetHistograms()) <= MaxHistograms && len(r.GetEvents()) <= MaxEvents {
		defined := map[string]bool{}
		size := reportOverhead + proto.Size(r)
		for _, id := range o.idsOf(r) {
			size += o.definitionsCost(id, defined, true)
		}
		if size <= partBytes {
			return []*nbsv1.Report{r}
		}
	}

	var parts []*nbsv1.Report
	var cur *nbsv1.Report
	var size int
	var defined map[string]bool
	start := func() {
		cur = &nbsv1.Report{TimeUnixNano: r.GetTimeUnixNano(), IntervalMs: r.GetIntervalMs(), Snapshot: r.GetSnapshot()}
		parts = append(parts, cur)
		size, defined = reportOverhead, map[string]bool{}
	}
	start()
	// place puts one entry into the current part or a new one.
	place := func(id string, entry proto.Message, full func() bool, put func()) {
		n := fieldSize(proto.Size(entry))
		if alone := reportOverhead + n + o.definitionsCost(id, map[string]bool{}, false); alone > partBytes {
			o.log.Error("dropping a measurement too large to send", "metric", id, "bytes", alone, "max", partBytes)
			o.dropped.Add(1)
			return
		}
		need := n + o.definitionsCost(id, defined, false)
		if full() || size+need > partBytes {
			start()
			need = n + o.definitionsCost(id, defined, false)
		}
		put()
		size += need
		o.definitionsCost(id, defined, true)
	}

	samples := slices.Clone(r.GetSamples())
	slices.SortStableFunc(samples, func(a, b *nbsv1.Sample) int {
		return boolOrder(isChild(a.GetMetricId()), isChild(b.GetMetricId()))
	})
	for _, s := range samples {
		place(s.GetMetricId(), s, func() bool { return len(cur.Samples) >= MaxSamples },
			func() { cur.Samples = append(cur.Samples, s) })
	}
	for _, h := range r.GetHistograms() {
		place(h.GetMetricId(), h, func() bool { return len(cur.Histograms) >= MaxHistograms },
			func() { cur.Histograms = append(cur.Histograms, h) })
	}
	for _, e := range r.GetEvents() {
		place(e.GetMetricId(), e, func() bool { return len(cur.Events) >= MaxEvents },
			func() { cur.Events = append(cur.Events, e) })
	}
	if len(parts) > 1 {
		o.log.Info("report split to fit the collector's limits", "parts", len(parts), "samples", len(r.GetSamples()),
			"histograms", len(r.GetHistograms()), "events", len(r.GetEvents()))
	}
	return parts
}

// definitionsCost is what the definitions of id and its ancestors not yet in
// defined add to a report; mark records them as defined.
func (o *Outbox) definitionsCost(id string, defined map[string]bool, mark bool) int {
	cost := 0
	for p := id; p != "" && !defined[p]; p = schema.Parent(p) {
		if n := o.spool.DefinitionSize(p); n > 0 {
			cost += fieldSize(n)
		}
		if mark {
			defined[p] = true
		}
	}
	return cost
}

func (o *Outbox) idsOf(r *nbsv1.Report) []string {
	out := make([]string, 0, items(r))
	for _, s := range r.GetSamples() {
		out = append(out, s.GetMetricId())
	}
	for _, h := range r.GetHistograms() {
		out = append(out, h.GetMetricId())
	}
	for _, e := range r.GetEvents() {
		out = append(out, e.GetMetricId())
	}
	return out
}

// fieldSize is the encoded size of an embedded message of n bytes in a
// repeated field (a one-byte tag: every field number used is below 16).
func fieldSize(n int) int { return 1 + protowire.SizeBytes(n) }

func items(r *nbsv1.Report) int { return len(r.Samples) + len(r.Histograms) + len(r.Events) }

func isChild(id string) bool { return schema.Parent(id) != "" }

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
