package readlimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
)

func TestAdmit(t *testing.T) {
	type step struct {
		caller string
		slots  int
		ok     bool
		says   string // part of the refusal
	}
	cases := []struct {
		name  string
		lim   Limits
		steps []step
	}{
		{"a caller up to its slots, then refused", Limits{MaxConcurrent: 32, MaxPerCaller: 8}, []step{
			{"a", 4, true, ""}, {"a", 4, true, ""}, {"a", 1, false, "8 slots of 8 taken and this request needs 1 (--reads.max-per-caller)"},
		}},
		{"another caller is not held back by the first", Limits{MaxConcurrent: 32, MaxPerCaller: 8}, []step{
			{"a", 4, true, ""}, {"a", 4, true, ""}, {"a", 4, false, "--reads.max-per-caller"}, {"b", 4, true, ""}, {"b", 1, true, ""},
		}},
		{"all callers together", Limits{MaxConcurrent: 10, MaxPerCaller: 8}, []step{
			{"a", 4, true, ""}, {"b", 4, true, ""}, {"c", 4, false, "10 slots, --reads.max-concurrent"}, {"c", 2, true, ""}, {"d", 1, false, "--reads.max-concurrent"},
		}},
		{"a request larger than a caller's allowance runs alone", Limits{MaxConcurrent: 32, MaxPerCaller: 2}, []step{
			{"a", 4, true, ""}, {"a", 1, false, "2 slots of 2 taken"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := New(c.lim)
			var releases []func()
			for i, s := range c.steps {
				release, err := l.admit(s.caller, s.slots)
				if s.ok {
					if err != nil {
						t.Fatalf("step %d (%s, %d slots): %v", i, s.caller, s.slots, err)
					}
					releases = append(releases, release)
					continue
				}
				if err == nil {
					t.Fatalf("step %d (%s, %d slots) admitted, want refused", i, s.caller, s.slots)
				}
				if errkind.Of(err) != errkind.Overloaded || !strings.Contains(err.Error(), s.says) {
					t.Errorf("step %d: %v (%v), want overloaded saying %q", i, err, errkind.Of(err), s.says)
				}
				if d, ok := errkind.RetryAfter(err); !ok || d != RetryAfter {
					t.Errorf("step %d: Retry-After %v, %v; want %v", i, d, ok, RetryAfter)
				}
			}
			for _, r := range releases {
				r()
				r() // a second release gives nothing back twice
			}
			for _, s := range c.steps {
				if held, total := l.Held(s.caller); held != 0 || total != 0 {
					t.Errorf("after every release %s holds %d, all %d", s.caller, held, total)
				}
			}
			if len(l.held) != 0 {
				t.Errorf("callers kept after releasing: %v", l.held)
			}
		})
	}
}

// Many goroutines of one caller never hold more than its slots at once.
func TestAdmitConcurrent(t *testing.T) {
	l := New(Limits{MaxConcurrent: 100, MaxPerCaller: 5})
	var mu sync.Mutex
	inside, most, refused := 0, 0, 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 20 {
				release, err := l.admit("a", 1)
				if err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				inside--
				mu.Unlock()
				release()
			}
		})
	}
	wg.Wait()
	if most > 5 || most == 0 {
		t.Errorf("at most %d inside at once, want 1 to 5", most)
	}
	if _, total := l.Held("a"); total != 0 {
		t.Errorf("%d slots still held", total)
	}
	t.Logf("most inside %d, refused %d of 1000", most, refused)
}

func TestCaller(t *testing.T) {
	cases := []struct {
		name   string
		p      access.Principal
		remote string
		want   string
	}{
		{"a token", access.Principal{Name: "acme-reports", Role: access.RoleCustomer, Via: access.ViaToken, TokenID: 7}, "10.0.0.1:5000", "token:7"},
		{"a session shares its token's allowance", access.Principal{Name: "acme-reports", Role: access.RoleCustomer, Via: access.ViaSession, TokenID: 7}, "10.0.0.2:5000", "token:7"},
		{"a proxy user", access.Principal{Name: "ann", Role: access.RoleViewer, Via: access.ViaProxy}, "10.0.0.3:5000", "proxy:ann"},
		{"no authentication: by address", access.Principal{Name: "anonymous", Role: access.RoleAdmin, Via: access.ViaNone}, "10.0.0.4:5000", "address:10.0.0.4"},
		{"an address without a port", access.Principal{Via: access.ViaNone}, "10.0.0.5", "address:10.0.0.5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Caller(c.p, c.remote); got != c.want {
				t.Errorf("Caller = %q, want %q", got, c.want)
			}
		})
	}
	// Admit finds the caller Require put in the request's context.
	l := New(Limits{MaxConcurrent: 8, MaxPerCaller: 4})
	r := httptest.NewRequest("GET", "/api/v1/reports", nil)
	r = r.WithContext(access.WithPrincipal(r.Context(), access.Principal{Via: access.ViaToken, TokenID: 3}))
	release, err := l.Admit(r, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if held, _ := l.Held("token:3"); held != 4 {
		t.Errorf("token 3 holds %d slots, want 4", held)
	}
}

// Admitted reads past Running wait their turn in order; one that waits
// past MaxWait is refused with Retry-After and gives its slots back; one
// whose client leaves gets its context's error.
func TestRunning(t *testing.T) {
	l := New(Limits{MaxConcurrent: 32, MaxPerCaller: 8, Running: 4, MaxWait: 300 * time.Millisecond})
	req := func(tokenID int64) *http.Request {
		r := httptest.NewRequest("GET", "/api/v1/reports", nil)
		return r.WithContext(access.WithPrincipal(r.Context(), access.Principal{Via: access.ViaToken, TokenID: tokenID}))
	}
	first, err := l.Admit(req(1), 4) // a report: all four running slots
	if err != nil {
		t.Fatal(err)
	}
	// The next, of another caller, waits; it runs once the first is done.
	got := make(chan error, 1)
	var second func()
	go func() {
		var err error
		second, err = l.Admit(req(2), 1)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a series ran beside a report that holds every running slot: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if held, total := l.Held("token:2"); held != 1 || total != 5 {
		t.Errorf("waiting: token 2 holds %d, all %d; want 1 and 5 (admitted, not running)", held, total)
	}
	first()
	if err := <-got; err != nil {
		t.Fatalf("the waiting series once the report was done: %v", err)
	}

	// A report now waits behind the series: past MaxWait it is refused.
	start := time.Now()
	_, err = l.Admit(req(3), 4)
	if errkind.Of(err) != errkind.Overloaded || !strings.Contains(err.Error(), "waited 300ms for its turn") {
		t.Fatalf("a report waiting past MaxWait: %v", err)
	}
	if d, ok := errkind.RetryAfter(err); !ok || d != RetryAfter {
		t.Errorf("Retry-After %v, %v", d, ok)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Errorf("refused after %v, want about 300ms", took)
	}
	if held, _ := l.Held("token:3"); held != 0 {
		t.Errorf("a refused read still holds %d slots", held)
	}

	// A client that leaves while waiting gets its context's error.
	r := req(4)
	ctx, cancel := context.WithCancel(r.Context())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := l.Admit(r.WithContext(ctx), 4); !errors.Is(err, context.Canceled) {
		t.Errorf("a client that left: %v, want context.Canceled", err)
	}
	second()
	if _, total := l.Held(""); total != 0 {
		t.Errorf("%d slots held after every read is done", total)
	}
}
