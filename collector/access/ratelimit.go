package access

import (
	"container/list"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
)

// Failed sign-ins — a login with a token that does not work, or any
// request whose Authorization header does not — are limited per client
// address (client.go), so nobody can try tokens as fast as the database
// answers, nor fill the log with the attempts. Each address has a bucket
// of --auth.failed-attempts-per-minute failures, refilled at that rate;
// while it is empty, every login and every request with an Authorization
// header from the address is answered 429 with Retry-After, without being
// checked — a valid token included, or a guess that worked would tell
// itself apart. Successes take nothing from the bucket. Sessions (cookies)
// and proxy users are not affected.

// Defaults of the failed sign-in limit.
const (
	DefaultFailedAttemptsPerMinute = 10
	DefaultFailedAttemptsClients   = 10000
)

// tooManyFailures answers 429 with Retry-After: the client's address is
// over the limit.
func tooManyFailures(addr string, perMinute int, retry time.Duration) error {
	return errkind.WithRetryAfter(errkind.Errorf(errkind.Overloaded,
		"too many failed sign-ins from %s: at most %d a minute (--auth.failed-attempts-per-minute); try again in %s",
		addr, perMinute, retry.Round(time.Second)), retry)
}

// failLimiter is the buckets of the addresses that failed recently: at
// most max of them, the least recently failed forgotten first (a full
// bucket is the same as none, so one refilled is forgotten as soon as
// room is wanted).
type failLimiter struct {
	perMinute int
	max       int

	mu      sync.Mutex
	buckets map[netip.Addr]*list.Element // of *failBucket
	recent  list.List                    // most recently failed first
}

type failBucket struct {
	key  netip.Addr
	left float64   // failures still allowed at at
	at   time.Time // when left was computed
}

func newFailLimiter(perMinute, max int) *failLimiter {
	return &failLimiter{perMinute: perMinute, max: max, buckets: map[netip.Addr]*list.Element{}}
}

// limitKey is what an address is counted as: itself, or for IPv6 its /64,
// which one host commonly holds whole (counting single addresses of it
// would give one host 2^64 buckets).
func limitKey(a netip.Addr) netip.Addr {
	if a.Is6() && !a.Is4In6() {
		return netip.PrefixFrom(a.WithZone(""), 64).Masked().Addr()
	}
	return a
}

func (l *failLimiter) refill(b *failBucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.left = min(float64(l.perMinute), b.left+d.Minutes()*float64(l.perMinute))
		b.at = now
	}
}

// check reports how long addr must wait before its next sign-in; 0 is
// not at all.
func (l *failLimiter) check(addr netip.Addr, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.buckets[limitKey(addr)]
	if !ok {
		return 0
	}
	b := e.Value.(*failBucket)
	l.refill(b, now)
	if b.left >= 1 {
		return 0
	}
	return time.Duration((1 - b.left) / float64(l.perMinute) * float64(time.Minute))
}

// fail takes one failure from addr's bucket and reports whether that
// emptied it (to log the moment an address goes over the limit, once).
func (l *failLimiter) fail(addr netip.Addr, now time.Time) (emptied bool) {
	if l == nil {
		return false
	}
	key := limitKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.buckets[key]
	if !ok {
		l.makeRoom(now)
		e = l.recent.PushFront(&failBucket{key: key, left: float64(l.perMinute), at: now})
		l.buckets[key] = e
	}
	l.recent.MoveToFront(e)
	b := e.Value.(*failBucket)
	l.refill(b, now)
	was := b.left >= 1
	b.left = max(0, b.left-1)
	return was && b.left < 1
}

// makeRoom forgets the buckets that have refilled, oldest first, and if
// none has, the least recently failed, until one more fits.
func (l *failLimiter) makeRoom(now time.Time) {
	for l.recent.Len() > 0 {
		back := l.recent.Back()
		b := back.Value.(*failBucket)
		l.refill(b, now)
		if l.recent.Len() < l.max && b.left < float64(l.perMinute) {
			return
		}
		l.recent.Remove(back)
		delete(l.buckets, b.key)
	}
}

// len is how many addresses are tracked.
func (l *failLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recent.Len()
}

// signInBlocked answers 429 and reports true when the request's client is
// over the limit.
func (a *Access) signInBlocked(w http.ResponseWriter, r *http.Request) bool {
	addr := a.client(r)
	retry := a.failures.check(addr, a.now())
	if retry <= 0 {
		return false
	}
	httpjson.WriteError(w, r, tooManyFailures(addrString(addr), a.cfg.FailedAttemptsPerMinute, retry), a.log)
	return true
}

// signInFailed counts a failed sign-in of the request's client.
func (a *Access) signInFailed(r *http.Request) {
	addr := a.client(r)
	if a.failures.fail(addr, a.now()) {
		a.log.Warn("failed sign-ins over the limit: refusing sign-ins from this address for a while",
			"client", addrString(addr), "per_minute", a.cfg.FailedAttemptsPerMinute)
	}
}
