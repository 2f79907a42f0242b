package access

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/httpjson"
)

func TestFailLimiter(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	a := netip.MustParseAddr("192.0.2.1")
	b := netip.MustParseAddr("192.0.2.2")
	type step struct {
		at        time.Duration // after t0
		addr      netip.Addr
		fail      bool          // count a failure after checking
		wantRetry time.Duration // what check says first
	}
	v6a := netip.MustParseAddr("2001:db8:1:2::1")
	v6b := netip.MustParseAddr("2001:db8:1:2:ffff::9") // the same /64
	v6c := netip.MustParseAddr("2001:db8:1:3::1")      // another /64
	tests := []struct {
		name  string
		per   int
		steps []step
	}{
		{"the limit, then a wait of one refill", 3, []step{
			{0, a, true, 0}, {0, a, true, 0}, {0, a, true, 0},
			{0, a, false, 20 * time.Second},
			{10 * time.Second, a, false, 10 * time.Second},
			{20 * time.Second, a, true, 0},
			{20 * time.Second, a, false, 20 * time.Second},
		}},
		{"addresses are counted apart", 2, []step{
			{0, a, true, 0}, {0, a, true, 0}, {0, a, false, 30 * time.Second},
			{0, b, true, 0}, {0, b, false, 0},
		}},
		{"a minute refills the whole bucket", 2, []step{
			{0, a, true, 0}, {0, a, true, 0}, {time.Minute, a, true, 0}, {time.Minute, a, true, 0}, {time.Minute, a, false, 30 * time.Second},
		}},
		{"an IPv6 /64 is one client", 2, []step{
			{0, v6a, true, 0}, {0, v6b, true, 0}, {0, v6a, false, 30 * time.Second}, {0, v6c, false, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFailLimiter(tt.per, 100)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if got := l.check(s.addr, now); got != s.wantRetry {
					t.Fatalf("step %d (%s at %s): retry %s, want %s", i, s.addr, s.at, got, s.wantRetry)
				}
				if s.fail {
					l.fail(s.addr, now)
				}
			}
		})
	}
}

// TestFailLimiterIsBounded: an attacker with many addresses costs at most
// the configured number of buckets, and buckets that refilled are dropped.
func TestFailLimiterIsBounded(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	l := newFailLimiter(1, 50)
	for i := range 1000 {
		l.fail(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), t0)
		if n := l.len(); n > 50 {
			t.Fatalf("after %d addresses: %d buckets, want at most 50", i+1, n)
		}
	}
	// The most recent are still limited, the oldest forgotten.
	if l.check(netip.AddrFrom4([4]byte{10, 0, 3, 231}), t0) == 0 {
		t.Error("the most recent address is not limited")
	}
	if l.check(netip.AddrFrom4([4]byte{10, 0, 0, 0}), t0) != 0 {
		t.Error("the oldest address is still tracked")
	}
	// A minute later every bucket is full: one new failure drops them all.
	l.fail(netip.MustParseAddr("192.0.2.1"), t0.Add(time.Minute))
	if n := l.len(); n != 1 {
		t.Errorf("%d buckets after every other refilled, want 1", n)
	}
	if emptied := newFailLimiter(2, 10).fail(netip.MustParseAddr("192.0.2.1"), t0); emptied {
		t.Error("one failure of two emptied the bucket")
	}
}

// TestFailedSignInsAreLimited: over HTTP, failed logins and bad bearer
// tokens from one address count towards its limit, and past it every
// sign-in from there gets 429 with Retry-After — even a valid token —
// while other addresses and successful sign-ins are not held back.
func TestFailedSignInsAreLimited(t *testing.T) {
	pool := testPool(t)
	// The test's requests all come from 127.0.0.1, a proxy trusted to say
	// in X-Forwarded-For which client it forwards.
	a, clk := newTestAccess(t, pool, Config{FailedAttemptsPerMinute: 3, TrustedProxies: PrefixList{netip.MustParsePrefix("127.0.0.1/32")}})
	secret, _ := mustCreate(t, a, NewToken{Name: "good", Role: RoleViewer})
	srv := testServer(t, a, pool, false)
	wrong := TokenPrefix + strings.Repeat("a", secretChars)
	do := func(client, method, path, bearer, body string) (int, http.Header, httpjson.ErrorBody) {
		t.Helper()
		var rd io.Reader = http.NoBody
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, srv.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", client)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb httpjson.ErrorBody
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &eb)
		return resp.StatusCode, resp.Header, eb
	}
	login := func(client, token string) (int, http.Header, httpjson.ErrorBody) {
		return do(client, "POST", "/api/v1/login", "", fmt.Sprintf(`{"token":%q}`, token))
	}

	// Successes do not count, however many.
	for range 5 {
		if code, _, _ := login("203.0.113.1", secret); code != 200 {
			t.Fatalf("login: %d", code)
		}
		if code, _, _ := do("203.0.113.1", "GET", "/api/v1/nodes", secret, ""); code != 200 {
			t.Fatalf("bearer: %d", code)
		}
	}
	// A wrong login, a wrong bearer token and a malformed header: three.
	if code, _, _ := login("203.0.113.1", wrong); code != 401 {
		t.Fatalf("wrong login: %d", code)
	}
	if code, _, _ := do("203.0.113.1", "GET", "/api/v1/nodes", wrong, ""); code != 401 {
		t.Fatalf("wrong bearer: %d", code)
	}
	if code, _, _ := do("203.0.113.1", "GET", "/api/v1/whoami", "garbage", ""); code != 401 {
		t.Fatalf("garbage bearer: %d", code)
	}
	// Now everything that signs in from there waits, the good token too.
	for _, try := range []func() (int, http.Header, httpjson.ErrorBody){
		func() (int, http.Header, httpjson.ErrorBody) { return login("203.0.113.1", wrong) },
		func() (int, http.Header, httpjson.ErrorBody) { return login("203.0.113.1", secret) },
		func() (int, http.Header, httpjson.ErrorBody) {
			return do("203.0.113.1", "GET", "/api/v1/nodes", secret, "")
		},
	} {
		code, h, eb := try()
		if code != 429 || h.Get("Retry-After") != "20" || eb.Error.Code != "too_many_requests" ||
			!strings.Contains(eb.Error.Message, "--auth.failed-attempts-per-minute") || !strings.Contains(eb.Error.Message, "203.0.113.1") {
			t.Errorf("over the limit: %d Retry-After %q %+v, want 429, 20 and a message naming the flag and address", code, h.Get("Retry-After"), eb)
		}
	}
	// Another address is not held back; neither is a session's cookie.
	if code, _, _ := login("203.0.113.2", secret); code != 200 {
		t.Errorf("another client: %d", code)
	}
	// After Retry-After, one more try.
	clk.add(20 * time.Second)
	if code, _, _ := login("203.0.113.1", secret); code != 200 {
		t.Errorf("after the wait: %d", code)
	}
	if code, _, _ := login("203.0.113.1", wrong); code != 401 {
		t.Errorf("after the wait, wrong: %d", code)
	}
	if code, _, _ := login("203.0.113.1", secret); code != 429 {
		t.Errorf("after the wait and another failure: %d, want 429", code)
	}
	// Only the successful logins made sessions.
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM access_sessions`).Scan(&n); err != nil || n != 7 {
		t.Errorf("%d sessions (%v), want the 7 successful logins", n, err)
	}
}
