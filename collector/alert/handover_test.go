package alert

import (
	"unsafe"

	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// The hand-over holds what fits in its bounds (reports, bytes), trimmed of
// what evaluation does not read, and remembers the nodes of the rest; past
// its bound of missed nodes it asks for every node to be read. take
// empties it.
func TestAlertHandoverBounds(t *testing.T) {
	small := store.Report{NodeID: 1, Samples: []store.Sample{{Path: "tcp_reset"}}}
	big := store.Report{NodeID: 2, Samples: make([]store.Sample, 100),
		Histograms: []store.Histogram{{Path: "latency"}}, Events: []store.Event{{Path: "tcp_reset/sent"}}}
	cases := []struct {
		name                  string
		maxReports, maxMissed int
		maxBytes              int64
		put                   []store.Report
		wantHeld, wantDropped int
		wantMissed            []int32
		wantAll               bool
		wantHeldNodes         []int32
	}{
		{"all fit", 10, 10, 1 << 20, []store.Report{small, big, small}, 3, 0, nil, false, []int32{1, 2, 1}},
		{"report bound", 2, 10, 1 << 20, []store.Report{small, small, big}, 2, 1, []int32{2}, false, []int32{1, 1}},
		// The big report does not fit the bytes left; the small one after it does.
		{"byte bound", 10, 10, 2*small.Bytes() + 10, []store.Report{small, big, small}, 2, 1, []int32{2}, false, []int32{1, 1}},
		{"missed bound", 0, 1, 1 << 20, []store.Report{small, big}, 0, 2, nil, true, nil},
		{"nothing held", 0, 10, 1 << 20, []store.Report{small, big, small}, 0, 3, []int32{1, 2}, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &handover{maxReports: c.maxReports, maxBytes: c.maxBytes, maxMissed: c.maxMissed}
			if got := h.put(c.put); got != c.wantDropped {
				t.Errorf("put dropped %d, want %d", got, c.wantDropped)
			}
			held, missed, all := h.take()
			var nodes []int32
			for _, r := range held {
				nodes = append(nodes, r.NodeID)
				if r.Histograms != nil || r.Events != nil {
					t.Errorf("held report of node %d keeps histograms or events", r.NodeID)
				}
			}
			if len(held) != c.wantHeld || !slices.Equal(nodes, c.wantHeldNodes) {
				t.Errorf("held nodes %v, want %v", nodes, c.wantHeldNodes)
			}
			var m []int32
			for id := range missed {
				m = append(m, id)
			}
			slices.Sort(m)
			if !slices.Equal(m, c.wantMissed) || all != c.wantAll {
				t.Errorf("missed %v all %v, want %v all %v", m, all, c.wantMissed, c.wantAll)
			}
			if r, m, a := h.take(); r != nil || m != nil || a || h.bytes != 0 {
				t.Errorf("second take: %d reports, missed %v, all %v, %d bytes; want it empty", len(r), m, a, h.bytes)
			}
		})
	}
}

// fromMemory returns what the database path's cursor would: per node in
// report order (two writer workers can commit one node's reports out of
// order), newer than the watermark, within the lookback of the node's
// newest report (a minute for a node without a watermark), with times at
// PostgreSQL's microseconds.
func TestAlertFromMemoryIsWhatTheCursorReads(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(node int32, sec float64) store.Report {
		return store.Report{NodeID: node, Seq: uint64(sec * 10), Time: t0.Add(time.Duration(sec * float64(time.Second)))}
	}
	ev := &evaluator{s: &Service{cfg: DefaultConfig()}, eng: NewEngine()}
	ev.eng.SetWatermark(1, t0.Add(10*time.Second))
	ev.eng.SetWatermark(2, t0)
	late := at(2, 700)
	late.Time = late.Time.Add(999) // nanoseconds PostgreSQL would not keep
	mem := []store.Report{
		at(1, 12), at(2, 5), at(1, 11), at(1, 10), at(1, 9), // node 1: committed out of order, two at or before its watermark
		at(2, 60), late, // node 2: the lookback (10 minutes) before 700 s leaves out 5 s and 60 s
		at(3, 1), at(3, 30), at(3, 100), // node 3 has no watermark: a minute before its newest
	}
	var got []string
	for _, r := range ev.fromMemory(mem) {
		got = append(got, fmt.Sprintf("%d:%s", r.NodeID, r.Time.Sub(t0)))
		if r.Time.Nanosecond()%1000 != 0 {
			t.Errorf("node %d report at %s: finer than a microsecond", r.NodeID, r.Time)
		}
	}
	if want := "1:11s 1:12s 2:11m40s 3:1m40s"; strings.Join(got, " ") != want {
		t.Errorf("fromMemory = %v, want %s", got, want)
	}
}

// A term that ends with reports still handed over gives their node ids to
// the forwarder (a NOTIFY to the next leader), and too many missed nodes
// become a sweep of every node.
func TestAlertHandBack(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxMiss  int
		want     []int32
		overflow bool
	}{
		{"held and missed nodes", 1, []int32{3, 5}, false},
		{"too many missed", 0, []int32{3}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Service{hook: make(chan []int32, 1), handover: &handover{maxReports: 1, maxBytes: 1 << 20, maxMissed: c.maxMiss},
				metrics: telemetry.New().Alert}
			s.handover.put([]store.Report{{NodeID: 3}, {NodeID: 5}})
			s.handBack()
			var got []int32
			select {
			case got = <-s.hook:
			default:
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) || s.overflow.Load() != c.overflow {
				t.Errorf("forwarded %v, sweep %v; want %v, %v", got, s.overflow.Load(), c.want, c.overflow)
			}
			if r, m, a := s.handover.take(); len(r) != 0 || len(m) != 0 || a {
				t.Errorf("hand-over not emptied: %d reports, %v, %v", len(r), m, a)
			}
		})
	}
}

// The array take returned and the evaluator gave back is the next put's,
// emptied: a cycle's hand-over allocates nothing once it has grown.
func TestHandoverRecycles(t *testing.T) {
	h := newHandover()
	h.put([]store.Report{{NodeID: 1, Samples: []store.Sample{{Path: "a"}}}, {NodeID: 2}})
	first, _, _ := h.take()
	h.recycle(first)
	h.put([]store.Report{{NodeID: 3}})
	again, _, _ := h.take()
	if len(again) != 1 || again[0].NodeID != 3 {
		t.Fatalf("took %v, want node 3's report", again)
	}
	if unsafe.SliceData(again) != unsafe.SliceData(first) {
		t.Error("the put after recycle grew a new array")
	}
	if old := again[:2][1]; old.NodeID != 0 || old.Samples != nil {
		t.Errorf("the recycled array still holds %+v", old)
	}
	h.recycle(again)
	batch := []store.Report{{NodeID: 4}, {NodeID: 5}}
	if allocs := testing.AllocsPerRun(100, func() {
		h.put(batch)
		r, _, _ := h.take()
		h.recycle(r)
	}); allocs > 0 {
		t.Errorf("a cycle's hand-over took %.1f allocations", allocs)
	}
}

// The hand-over holds copies of the samples (the writer fills a report's
// arrays again once OnStored returns), in an array that recycle gives back
// for the next put only when nothing it lent is still read: the reports
// of the last take. Reports an earlier take lent keep their samples.
func TestAlertHandoverCopiesSamples(t *testing.T) {
	h := newHandover()
	report := func(node int32, v float64) store.Report {
		return store.Report{NodeID: node, Samples: []store.Sample{{Path: "tcp_reset", Value: v}, {Path: "tcp_reset/sent", Value: v}}}
	}
	want := func(held []store.Report, v float64) {
		t.Helper()
		for _, r := range held {
			if !slices.Equal(r.Samples, report(0, v).Samples) {
				t.Fatalf("held %+v, want the samples put (value %g)", r.Samples, v)
			}
		}
	}
	src := []store.Report{report(1, 1)}
	h.put(src)
	for i := range src {
		clear(src[i].Samples) // the writer's next report
	}
	first, _, _ := h.take()
	want(first, 1)
	arena := unsafe.SliceData(first[0].Samples)
	h.recycle(first)
	h.put([]store.Report{report(3, 2)})
	second, _, _ := h.take()
	want(second, 2)
	if unsafe.SliceData(second[0].Samples) != arena {
		t.Errorf("the recycled samples' array was not filled again")
	}

	// Two takes, the first recycled last: the second's samples stay.
	h.put([]store.Report{report(4, 3)})
	third, _, _ := h.take()
	h.recycle(second)
	h.put([]store.Report{report(5, 4)})
	want(third, 3)
	fourth, _, _ := h.take()
	want(fourth, 4)
	if unsafe.SliceData(fourth[0].Samples) == unsafe.SliceData(third[0].Samples) {
		t.Errorf("a put wrote into samples a take still lends")
	}
}
