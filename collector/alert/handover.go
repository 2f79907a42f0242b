package alert

import (
	"sync"
	"unsafe"

	"github.com/nbs-project/nbs/collector/store"
)

// The hand-over's bounds. At 3,000 reports/s (30,000 nodes at 10 s) a
// healthy report takes a few hundred bytes here and the evaluator takes
// them every cycle (well under a second), so the bounds are only reached
// when the evaluator is stalled (a database outage, a restart); beyond them
// nothing is lost, the nodes are read from PostgreSQL instead.
const (
	// handoverReports and handoverBytes bound the reports held, in number
	// and in memory (reportSize; a snapshot report is tens of KB).
	handoverReports = 1 << 16
	handoverBytes   = 32 << 20
	// handoverMissed bounds the nodes remembered as missed; beyond it the
	// evaluator reads every node from PostgreSQL.
	handoverMissed = 1 << 16
)

// handover passes the reports this collector's own writer committed, while
// it leads, to its evaluator in memory, so that it does not read them back
// from PostgreSQL. It is bounded in reports and bytes; a report it has no
// room for leaves its node marked missed, and the evaluator then reads that
// node from the database, which holds everything the hand-over dropped
// (the writer hands over only after commit). The reports, missed nodes and
// the all flag are taken together under one lock, so the evaluator never
// sees a node's later report without learning that an earlier one was
// dropped.
type handover struct {
	mu      sync.Mutex
	reports []store.Report
	// spare is the array the evaluator gave back (recycle), which the
	// next put fills: grown anew each cycle, the hand-over's arrays were a
	// fifteenth of the collector's allocations at 10,000 nodes.
	spare []store.Report
	// samples holds the held reports' samples, copied: the writer
	// reuses a report's arrays once OnStored returns. spareSamples is
	// the array recycle gave back with spare, and lent the one the
	// last take returned (with the reports at lentAt).
	samples, spareSamples, lent []store.Sample
	lentAt                      uintptr
	bytes                       int64

	missed     map[int32]bool
	all        bool // more nodes missed than handoverMissed: read every node
	maxReports int
	maxBytes   int64
	maxMissed  int
}

func newHandover() *handover {
	return &handover{maxReports: handoverReports, maxBytes: handoverBytes, maxMissed: handoverMissed}
}

// put holds what it has room for, trimmed to what evaluation reads (the
// histograms and events stay with the writer's batch), and returns how
// many reports it had no room for. It only takes a lock that take holds
// for a swap, so it never blocks the writer for long.
func (h *handover) put(reports []store.Report) (dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reports == nil && h.spare != nil {
		h.reports, h.spare = h.spare, nil
	}
	if h.samples == nil && h.spareSamples != nil {
		h.samples, h.spareSamples = h.spareSamples, nil
	}
	for i := range reports {
		r := &reports[i]
		kept := store.Report{NodeID: r.NodeID, InstanceID: r.InstanceID, Seq: r.Seq,
			Time: r.Time, Received: r.Received, IntervalMS: r.IntervalMS, Samples: r.Samples}
		n := kept.Bytes()
		if len(h.reports) < h.maxReports && h.bytes+n <= h.maxBytes {
			// Grown, the array moves; what was held keeps the old one.
			at := len(h.samples)
			h.samples = append(h.samples, r.Samples...)
			kept.Samples = h.samples[at:len(h.samples):len(h.samples)]
			h.reports = append(h.reports, kept)
			h.bytes += n
			continue
		}
		dropped++
		if h.all {
			continue
		}
		if len(h.missed) >= h.maxMissed {
			h.all, h.missed = true, nil
			continue
		}
		if h.missed == nil {
			h.missed = map[int32]bool{}
		}
		h.missed[r.NodeID] = true
	}
	return dropped
}

// recycle gives back an array take returned once nothing reads it any
// more: emptied, the next put fills it.
func (h *handover) recycle(reports []store.Report) {
	if cap(reports) == 0 || cap(reports) > h.maxReports {
		return
	}
	reports = reports[:cap(reports)]
	clear(reports) // nothing of the reports stays reachable from it
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spare = reports[:0]
	// Their samples too, if these are what the last take lent (another
	// take since may have lent its own, still read).
	if h.lentAt == uintptr(unsafe.Pointer(unsafe.SliceData(reports))) && int64(cap(h.lent)) <= h.maxBytes/int64(unsafe.Sizeof(store.Sample{})) {
		clear(h.lent)
		h.spareSamples = h.lent[:0]
	}
	h.lent, h.lentAt = nil, 0
}

// take empties the hand-over: the reports in the order they were
// committed, the nodes whose reports were dropped, and whether so many were
// that every node must be read from the database.
func (h *handover) take() (reports []store.Report, missed map[int32]bool, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	reports, missed, all = h.reports, h.missed, h.all
	h.lent, h.lentAt = h.samples, uintptr(unsafe.Pointer(unsafe.SliceData(reports)))
	h.reports, h.samples, h.missed, h.all, h.bytes = nil, nil, nil, false, 0
	return reports, missed, all
}
