package access

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/httpjson"
)

// A credential check against a database that cannot be reached answers
// 503 with Retry-After, for a token and a session cookie alike, and leaves
// the cookie alone: a closed port at once, and a server that accepts the
// connection but never answers (a host gone mid-failover) within the
// lookup's bound. A credential that does not even parse is still 401: it
// needs no database to be refused.
func TestCredentialCheckWithoutADatabase(t *testing.T) {
	closed := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	// silent accepts connections and never says a word.
	silent := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			var conns []net.Conn
			for {
				c, err := l.Accept()
				if err != nil {
					for _, c := range conns {
						c.Close()
					}
					return
				}
				conns = append(conns, c)
			}
		}()
		t.Cleanup(func() { l.Close(); <-done })
		return l.Addr().String()
	}
	token := TokenPrefix + strings.Repeat("a", secretChars)
	cases := []struct {
		name    string
		addr    func(*testing.T) string
		request func(*http.Request)
		status  int
		within  time.Duration
	}{
		{"a token, the port closed", closed, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }, 503, 2 * time.Second},
		{"a session, the port closed", closed, func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: cookieName, Value: strings.Repeat("b", secretChars)})
		}, 503, 2 * time.Second},
		{"a token, the server silent", silent, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }, 503, lookupTimeout + 2*time.Second},
		{"a malformed token needs no database", closed, func(r *http.Request) { r.Header.Set("Authorization", "Bearer nbs_short") }, 401, 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// No connect_timeout: only the lookup's own bound ends a
			// connection that never gets an answer.
			pool, err := pgxpool.New(context.Background(), "postgres://nbs@"+c.addr(t)+"/nbs?sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			a, _ := newTestAccess(t, pool, DefaultConfig())
			reached := false
			h := a.Require(RoleViewer, false)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
			r := httptest.NewRequest("GET", "/api/v1/nodes", nil)
			c.request(r)
			w := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(w, r)
			took := time.Since(start)
			var body httpjson.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != c.status || reached {
				t.Fatalf("HTTP %d %s (handler reached: %v); want %d", w.Code, w.Body, reached, c.status)
			}
			if took > c.within {
				t.Errorf("answered after %v, want within %v", took, c.within)
			}
			if c.status != 503 {
				return
			}
			if body.Error.Code != "unavailable" || !strings.Contains(body.Error.Message, "database cannot be reached") {
				t.Errorf("error %+v, want unavailable saying the database cannot be reached", body.Error)
			}
			if ra := w.Header().Get("Retry-After"); ra != "5" {
				t.Errorf("Retry-After %q, want 5", ra)
			}
			if sc := w.Header().Values("Set-Cookie"); len(sc) > 0 {
				t.Errorf("cookies set: %q", sc)
			}
		})
	}
}
