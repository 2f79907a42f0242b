package spool

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// partBytes is the most one report may encode to, counting the definitions
// a stream may have to attach to it. A quarter of wire.MaxMessageBytes
// leaves room for a collector configured below its default, and keeps the
// rows a report becomes of a reasonable size.
const partBytes = wire.MaxMessageBytes / 4

// reportOverhead covers a report's own fields (sequence, time, interval,
// snapshot flag) and the ConnectRequest around it, generously.
const reportOverhead = 64

// split cuts a report into parts the collector accepts: within its per-report
// counts and, with every definition a stream might attach, within partBytes.
// used are the report's metric ids, whose definitions are recorded already.
// Roots go first, so the first part carries them all. An entry too large on
// its own is dropped, logged and counted.
func (s *Spool) split(r *nbsv1.Report, used []string) []*nbsv1.Report {
	if len(r.GetSamples()) <= wire.MaxSamples && len(r.GetHistograms()) <= wire.MaxHistograms && len(r.GetEvents()) <= wire.MaxEvents &&
		len(r.GetFlows()) <= wire.MaxFlowEdges && len(r.GetAddressHolders()) <= wire.MaxAddressHolders {
		defined := map[string]bool{}
		size := reportOverhead + proto.Size(r)
		for _, id := range used {
			size += s.definitionsCost(id, defined, true)
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
		if alone := reportOverhead + n + s.definitionsCost(id, map[string]bool{}, false); alone > partBytes {
			s.log.Error("dropping a measurement too large to send", "metric", id, "bytes", alone, "max", partBytes)
			s.dropped++
			return
		}
		need := n + s.definitionsCost(id, defined, false)
		if full() || size+need > partBytes {
			start()
			need = n + s.definitionsCost(id, defined, false)
		}
		put()
		size += need
		s.definitionsCost(id, defined, true)
	}

	samples := slices.Clone(r.GetSamples())
	slices.SortStableFunc(samples, func(a, b *nbsv1.Sample) int {
		return boolOrder(isChild(a.GetMetricId()), isChild(b.GetMetricId()))
	})
	for _, x := range samples {
		place(x.GetMetricId(), x, func() bool { return len(cur.Samples) >= wire.MaxSamples },
			func() { cur.Samples = append(cur.Samples, x) })
	}
	for _, x := range r.GetHistograms() {
		place(x.GetMetricId(), x, func() bool { return len(cur.Histograms) >= wire.MaxHistograms },
			func() { cur.Histograms = append(cur.Histograms, x) })
	}
	for _, x := range r.GetEvents() {
		place(x.GetMetricId(), x, func() bool { return len(cur.Events) >= wire.MaxEvents },
			func() { cur.Events = append(cur.Events, x) })
	}
	// Flow edges and address holders name no metric: no definitions.
	for _, x := range r.GetFlows() {
		place("", x, func() bool { return len(cur.Flows) >= wire.MaxFlowEdges },
			func() { cur.Flows = append(cur.Flows, x) })
	}
	for _, x := range r.GetAddressHolders() {
		place("", x, func() bool { return len(cur.AddressHolders) >= wire.MaxAddressHolders },
			func() { cur.AddressHolders = append(cur.AddressHolders, x) })
	}
	if len(parts) > 1 {
		s.log.Info("report split to fit the collector's limits", "parts", len(parts), "samples", len(r.GetSamples()),
			"histograms", len(r.GetHistograms()), "events", len(r.GetEvents()),
			"flows", len(r.GetFlows()), "address_holders", len(r.GetAddressHolders()))
	}
	return parts
}

// definitionsCost is what the definitions of id and its ancestors not yet in
// defined add to a report; mark records them as defined.
func (s *Spool) definitionsCost(id string, defined map[string]bool, mark bool) int {
	cost := 0
	for p := id; p != "" && !defined[p]; p = schema.Parent(p) {
		if n := s.definitionSize(p); n > 0 {
			cost += fieldSize(n)
		}
		if mark {
			defined[p] = true
		}
	}
	return cost
}

// fieldSize is the encoded size of an embedded message of n bytes in a
// repeated field (a one-byte tag: every field number used is below 16).
func fieldSize(n int) int { return 1 + protowire.SizeBytes(n) }

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
