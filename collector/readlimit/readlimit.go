// Package readlimit admits heavy reads — reports, series, evidence — by
// caller, so that no caller can take the collector's read capacity from
// the others: each caller (a token, with the sessions logged in with it; a
// proxy user) may hold a few slots, and all callers together a bounded
// number. Past either, a request is refused at once with an error of kind
// Overloaded and a Retry-After, rather than queued: a queue would only
// hold the request, its memory and its client while the same caller's
// other reads finish.
//
// The reads themselves run on their own bounded database pool with a
// statement timeout (collector/store.ReadPool); this package bounds how
// many wait for it.
package readlimit

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
)

// Limits are the slots heavy reads may hold; what a read costs is its
// route's (collector/api).
type Limits struct {
	// MaxConcurrent bounds the slots of all callers together.
	MaxConcurrent int
	// MaxPerCaller bounds the slots of one caller.
	MaxPerCaller int
}

// DefaultLimits: eight slots a caller (two reports, or the six charts
// and evidence a node's page asks for at once), 32 in all.
func DefaultLimits() Limits { return Limits{MaxConcurrent: 32, MaxPerCaller: 8} }

// RetryAfter is what a refused caller is told to wait: about what a report
// takes, so that one of its slots is likely free by then.
const RetryAfter = 2 * time.Second

// Limiter counts the slots held. Safe for concurrent use.
type Limiter struct {
	lim     Limits
	refused *prometheus.CounterVec // limit: caller, collector

	mu    sync.Mutex
	total int
	held  map[string]int // caller → slots; callers holding none are not kept
}

// New returns a Limiter of l; limits below 1 are 1.
func New(l Limits) *Limiter {
	l.MaxConcurrent, l.MaxPerCaller = max(l.MaxConcurrent, 1), max(l.MaxPerCaller, 1)
	return &Limiter{lim: l, held: map[string]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nbs_collector_read_refusals_total",
			Help: "Heavy reads (reports, series, evidence) answered 429, by the limit they met: caller (--reads.max-per-caller) or collector (--reads.max-concurrent)."},
			[]string{"limit"})}
}

// Collectors are the limiter's metrics for /metrics: the slots held now
// and the requests refused.
func (l *Limiter) Collectors() []prometheus.Collector {
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nbs_collector_read_slots_held",
		Help: "Heavy-read slots held by requests in flight (a report takes 4, a series or a page of evidence 1)."},
		func() float64 { _, total := l.Held(""); return float64(total) })
	return []prometheus.Collector{held, l.refused}
}

// Limits returns the limits in force.
func (l *Limiter) Limits() Limits { return l.lim }

// Admit takes slots for a request of the caller that collector/access put
// in r's context. release gives them back and must be called once the
// request's reads are done. A request costing more than a caller may hold
// is charged the caller's whole allowance, so it can still run alone.
func (l *Limiter) Admit(r *http.Request, slots int) (release func(), err error) {
	return l.admit(Caller(access.FromContext(r.Context()), r.RemoteAddr), slots)
}

func (l *Limiter) admit(caller string, slots int) (func(), error) {
	slots = min(max(slots, 1), l.lim.MaxPerCaller)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.held[caller]+slots > l.lim.MaxPerCaller:
		l.refused.WithLabelValues("caller").Inc()
		return nil, errkind.WithRetryAfter(errkind.Errorf(errkind.Overloaded,
			"too many heavy reads (reports, series, evidence) in flight for this caller: %s of %d taken and this request needs %d (--reads.max-per-caller); retry when one has finished",
			slotsWord(l.held[caller]), l.lim.MaxPerCaller, slots), RetryAfter)
	case l.total+slots > l.lim.MaxConcurrent:
		l.refused.WithLabelValues("collector").Inc()
		return nil, errkind.WithRetryAfter(errkind.Errorf(errkind.Overloaded,
			"the collector is serving as many heavy reads (reports, series, evidence) as it admits (%s, --reads.max-concurrent); retry shortly",
			slotsWord(l.lim.MaxConcurrent)), RetryAfter)
	}
	l.held[caller] += slots
	l.total += slots
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total -= slots
			if l.held[caller] -= slots; l.held[caller] <= 0 {
				delete(l.held, caller)
			}
		})
	}, nil
}

func slotsWord(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return strconv.Itoa(n) + " slots"
}

// Held returns the slots a caller holds and all callers hold, for tests
// and diagnostics.
func (l *Limiter) Held(caller string) (callers, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[caller], l.total
}

// Caller names whom a request's slots are charged to: the token behind a
// token or session (a customer's logins and scripts share one allowance),
// a proxy's user, and without authentication (--auth.mode=none, where
// everyone is admin) the client's address.
func Caller(p access.Principal, remoteAddr string) string {
	switch {
	case p.TokenID != 0:
		return "token:" + strconv.FormatInt(p.TokenID, 10)
	case p.Via == access.ViaProxy:
		return "proxy:" + p.Name
	case p.Via == access.ViaNone || p.Via == "":
		host, _, err := net.SplitHostPort(remoteAddr)
		if err != nil {
			host = remoteAddr
		}
		return "address:" + host
	}
	return fmt.Sprintf("%s:%s", p.Via, p.Name)
}
