package export

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nbs-project/nbs/collector/httpjson"
)

// KindStatus is what the newest export of one kind held (scrape, or a
// push receiver's name), on this collector.
type KindStatus struct {
	Kind       string    `json:"kind"`
	At         time.Time `json:"at"`
	Nodes      int       `json:"nodes"`
	Series     int       `json:"series"`
	Overflowed int       `json:"overflowed"`
	// OverflowedTotal is every export's overflowed series since this
	// collector started.
	OverflowedTotal int64   `json:"overflowed_total"`
	TookMS          float64 `json:"took_ms"`
	Exports         int64   `json:"exports"`
}

// ReceiverStatus is a push receiver's state, as its pusher reports it.
type ReceiverStatus struct {
	Name string `json:"name"`
	Type string `json:"type"`
	URL  string `json:"url"`
	// QueueBytes and QueueOldest: what waits to be sent.
	QueueBytes  int64      `json:"queue_bytes"`
	QueueOldest *time.Time `json:"queue_oldest,omitempty"`
	LastSuccess *time.Time `json:"last_success,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	Sent        int64      `json:"samples_sent"`
	Dropped     int64      `json:"samples_dropped"`
}

// Status is GET /api/v1/export/status: the export's settings and what its
// newest exports held.
type Status struct {
	WindowSeconds      float64          `json:"window_seconds"`
	CounterHoldSeconds float64          `json:"counter_hold_seconds"`
	MaxSeriesPerNode   int              `json:"max_series_per_node"`
	MaxSeriesPerFamily int              `json:"max_series_per_family"`
	Exports            []KindStatus     `json:"exports"`
	Receivers          []ReceiverStatus `json:"receivers"`
}

// ledger keeps the newest export of each kind.
type ledger struct {
	mu    sync.Mutex
	kinds map[string]*KindStatus
	// receivers, when set, reports the push receivers (collector/export/push).
	receivers func() []ReceiverStatus
}

// maxKinds bounds the ledger: kinds are the scrape and the configured
// receivers, a handful; a bug naming kinds per request cannot grow it.
const maxKinds = 64

func (l *ledger) record(kind string, at time.Time, s Stats, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = map[string]*KindStatus{}
	}
	k := l.kinds[kind]
	if k == nil {
		if len(l.kinds) >= maxKinds {
			return
		}
		k = &KindStatus{Kind: kind}
		l.kinds[kind] = k
	}
	k.At, k.Nodes, k.Series, k.Overflowed = at, s.Nodes, s.Series, s.Overflowed
	k.OverflowedTotal += int64(s.Overflowed)
	k.TookMS = float64(took.Microseconds()) / 1000
	k.Exports++
}

// Record notes one export of kind (a pusher's receiver name), for the
// status page.
func (e *Exporter) Record(kind string, snap Snapshot, took time.Duration) {
	e.ledger.record(kind, snap.Now, snap.Stats, took)
}

// SetReceivers gives the status the push receivers' state.
func (e *Exporter) SetReceivers(f func() []ReceiverStatus) {
	e.ledger.mu.Lock()
	defer e.ledger.mu.Unlock()
	e.ledger.receivers = f
}

// Status is the export's settings and its newest exports on this collector.
func (e *Exporter) Status() Status {
	e.ledger.mu.Lock()
	kinds := make([]KindStatus, 0, len(e.ledger.kinds))
	for _, k := range e.ledger.kinds {
		kinds = append(kinds, *k)
	}
	receivers := e.ledger.receivers
	e.ledger.mu.Unlock()
	slices.SortFunc(kinds, func(a, b KindStatus) int { return strings.Compare(a.Kind, b.Kind) })
	st := Status{WindowSeconds: e.cfg.Window.Seconds(), CounterHoldSeconds: e.cfg.CounterHold.Seconds(),
		MaxSeriesPerNode: e.cfg.MaxSeriesPerNode, MaxSeriesPerFamily: e.cfg.MaxSeriesPerFamily, Exports: kinds, Receivers: []ReceiverStatus{}}
	if receivers != nil {
		st.Receivers = receivers()
	}
	return st
}

// GetStatus answers GET /api/v1/export/status (staff).
func (h *Handler) GetStatus(w http.ResponseWriter, r *http.Request) {
	httpjson.Write(w, http.StatusOK, h.e.Status())
}
