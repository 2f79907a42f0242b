// Package readlimit admits heavy reads — reports, series, evidence — so
// that no caller can slow anyone else: not the agents' writes, not the
// token checks, not another customer's reads.
//
// Two stages. Admission: each caller (a token, with the sessions logged in
// with it; a proxy user) may hold a few slots, and all callers together a
// bounded number; past either, a request is refused at once with an error
// of kind Overloaded and a Retry-After. Running: of the admitted, only so
// many slots' worth run at once, the rest wait their turn in order of
// arrival. The first stage bounds what one caller can queue (its 24th
// parallel report is refused, not queued ahead of everyone else's); the
// second bounds the CPU heavy reads take from ingest, in the database and
// in the collector alike: on 2 cores, two reports computing side by side
// took both, and tripled the agents' report→ack p99 (BENCHMARKS.md,
// "One customer's reports").
//
// The reads themselves run on their own bounded database pool with a
// statement timeout (collector/store.ReadPool).
package readlimit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
)

// Limits are the slots heavy reads may hold; what a read costs is its
// route's (collector/api).
type Limits struct {
	// MaxConcurrent bounds the slots admitted, running or waiting, of all
	// callers together.
	MaxConcurrent int
	// MaxPerCaller bounds the slots admitted for one caller.
	MaxPerCaller int
	// Running bounds the slots that run at once; admitted reads past it
	// wait their turn.
	Running int
	// MaxWait bounds how long an admitted read waits for its turn; past
	// it, it is refused as if it had not been admitted.
	MaxWait time.Duration
}

// RetryAfter is what a refused caller is told to wait: about what a report
// takes, so that one of its slots is likely free by then.
const RetryAfter = 2 * time.Second

// Limiter counts the slots held. Safe for concurrent use.
type Limiter struct {
	lim     Limits
	run     *semaphore.Weighted    // the running stage; first come, first served
	refused *prometheus.CounterVec // limit: caller, collector, wait

	mu    sync.Mutex
	total int
	held  map[string]int // caller → slots; callers holding none are not kept
}

// New returns a Limiter of l; limits below 1 are 1, and a MaxWait of 0 is
// a minute.
func New(l Limits) *Limiter {
	l.MaxConcurrent, l.MaxPerCaller, l.Running = max(l.MaxConcurrent, 1), max(l.MaxPerCaller, 1), max(l.Running, 1)
	if l.MaxWait <= 0 {
		l.MaxWait = time.Minute
	}
	return &Limiter{lim: l, held: map[string]int{}, run: semaphore.NewWeighted(int64(l.Running)),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nbs_collector_read_refusals_total",
			Help: "Heavy reads (reports, series, evidence) answered 429, by the limit they met: caller (--reads.max-per-caller), collector (--reads.max-concurrent) or wait (their turn to run did not come in time)."},
			[]string{"limit"})}
}

// Collectors are the limiter's metrics for /metrics: the slots held now
// and the requests refused.
func (l *Limiter) Collectors() []prometheus.Collector {
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nbs_collector_read_slots_held",
		Help: "Heavy-read slots admitted, running or waiting their turn (a report takes 4, a series or a page of evidence 1)."},
		func() float64 { _, total := l.Held(""); return float64(total) })
	return []prometheus.Collector{held, l.refused}
}

// Limits returns the limits in force.
func (l *Limiter) Limits() Limits { return l.lim }

// Admit takes slots for a request of the caller that collector/access put
// in r's context, and waits for its turn to run. release gives them back
// and must be called once the request's reads are done. A request costing
// more than a caller may hold, or than may run at once, is charged the
// whole of it, so it can still run alone.
func (l *Limiter) Admit(r *http.Request, slots int) (release func(), err error) {
	ctx := r.Context()
	caller := Caller(access.FromContext(ctx), r.RemoteAddr)
	slots = min(max(slots, 1), l.lim.MaxPerCaller)
	leave, err := l.admit(caller, slots)
	if err != nil {
		return nil, err
	}
	running := int64(min(slots, l.lim.Running))
	wait, cancel := context.WithTimeout(ctx, l.lim.MaxWait)
	defer cancel()
	if err := l.run.Acquire(wait, running); err != nil {
		leave()
		if ctx.Err() != nil {
			return nil, ctx.Err() // the client left
		}
		l.refused.WithLabelValues("wait").Inc()
		return nil, errkind.WithRetryAfter(errkind.Errorf(errkind.Overloaded,
			"the collector is busy with other heavy reads (reports, series, evidence): this one waited %s for its turn; retry shortly", l.lim.MaxWait), RetryAfter)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.run.Release(running)
			leave()
		})
	}, nil
}

// admit is the first stage: it takes slots for caller, or refuses.
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
