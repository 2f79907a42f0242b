package uplink

import (
	"sync"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Outbox holds reports until the collector acks them. It is bounded: when
// the collector is unreachable for longer than the outbox covers, the oldest
// reports are dropped (and counted) so the agent's memory stays fixed.
type Outbox struct {
	mu      sync.Mutex
	reports []*nbsv1.Report // ascending sequence
	max     int
	dropped uint64
	changed chan struct{} // closed and replaced whenever a report is added
}

func NewOutbox(max int) *Outbox {
	if max < 1 {
		max = 1
	}
	return &Outbox{max: max, changed: make(chan struct{})}
}

// Add appends a report; its sequence must be above every earlier one.
func (o *Outbox) Add(r *nbsv1.Report) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.reports) >= o.max {
		n := len(o.reports) - o.max + 1
		o.dropped += uint64(n)
		o.reports = append(o.reports[:0], o.reports[n:]...)
	}
	o.reports = append(o.reports, r)
	close(o.changed)
	o.changed = make(chan struct{})
}

// Ack forgets the report with this sequence.
func (o *Outbox) Ack(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, r := range o.reports {
		if r.GetSequence() == seq {
			o.reports = append(o.reports[:i], o.reports[i+1:]...)
			return
		}
		if r.GetSequence() > seq {
			return
		}
	}
}

// After returns the reports with a sequence above seq, and a channel that
// is closed when another report is added.
func (o *Outbox) After(seq uint64) ([]*nbsv1.Report, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*nbsv1.Report
	for _, r := range o.reports {
		if r.GetSequence() > seq {
			out = append(out, r)
		}
	}
	return out, o.changed
}

// Len is the number of un-acked reports.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reports)
}

// Dropped counts reports lost because the outbox was full.
func (o *Outbox) Dropped() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}
