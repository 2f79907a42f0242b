package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// apiClient calls a collector's HTTP side as one caller.
type apiClient struct {
	t      *testing.T
	base   string
	token  string // Authorization: Bearer
	cookie *http.Cookie
}

// answer is an HTTP answer as the tests look at it.
type answer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

// errorCode is the code of the JSON error envelope, "" if there is none.
func (a answer) errorCode() (code, message string) {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code, e.Error.Message
}

func (c apiClient) do(method, path string, body any) answer {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return answer{resp.StatusCode, resp.Header, b, time.Since(start)}
}

// startWithAdmin starts a collector of cfg with a bootstrap admin token
// and returns a client holding it.
func startWithAdmin(t *testing.T, cfg Config) (apiClient, func()) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Access.BootstrapAdminFile = "127.0.0.1:0", "127.0.0.1:0", tokenFile
	c, stop := startCollector(t, cfg)
	_, addr := c.Addrs()
	secret, err := os.ReadFile(tokenFile)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return apiClient{t: t, base: "http://" + addr, token: strings.TrimSpace(string(secret))}, stop
}

// While PostgreSQL is stopped, every route that needs it — the token and
// session checks first of all — answers 503 with Retry-After and a JSON
// error saying the database cannot be reached, at once; never 500, and
// never 401 (which would log a browser out). Once it is back, the same
// collector answers again.
func TestDatabaseStoppedAnswers503(t *testing.T) {
	ctx := context.Background()
	dir := pgcluster.ClusterDir(t)
	opts := pgcluster.Options{Dir: filepath.Join(dir, "pg")}
	pg, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })

	cfg := DefaultConfig()
	cfg.DBURL = pg.URL()
	admin, stop := startWithAdmin(t, cfg)
	defer stop()
	created := admin.do("POST", "/api/v1/tokens", map[string]any{"name": "acme", "role": "customer", "selector": map[string]string{"customer": "acme"}})
	var tok struct{ Token string }
	if err := json.Unmarshal(created.body, &tok); created.status != 201 || err != nil {
		t.Fatalf("create a customer token: %d %s", created.status, created.body)
	}
	customer := apiClient{t: t, base: admin.base, token: tok.Token}
	login := customer.do("POST", "/api/v1/login", map[string]string{"token": tok.Token})
	var session *http.Cookie
	for _, c := range (&http.Response{Header: login.header}).Cookies() {
		if strings.HasSuffix(c.Name, "nbs_session") {
			session = c
		}
	}
	if login.status != 200 || session == nil {
		t.Fatalf("log in: %d %s, cookie %v", login.status, login.body, session)
	}
	browser := apiClient{t: t, base: admin.base, cookie: session}
	nobody := apiClient{t: t, base: admin.base}
	if a := browser.do("GET", "/api/v1/whoami", nil); a.status != 200 {
		t.Fatalf("whoami by session before the stop: %d %s", a.status, a.body)
	}

	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		client       apiClient
		method, path string
		body         any
	}{
		{"the token check (whoami)", admin, "GET", "/api/v1/whoami", nil},
		{"the session check (whoami)", browser, "GET", "/api/v1/whoami", nil},
		{"the fleet", admin, "GET", "/api/v1/nodes", nil},
		{"a customer's report", customer, "GET", "/api/v1/reports", nil},
		{"tokens", admin, "GET", "/api/v1/tokens", nil},
		{"log in", nobody, "POST", "/api/v1/login", map[string]string{"token": tok.Token}},
		{"readiness", nobody, "GET", "/readyz", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.client.t = t
			a := c.client.do(c.method, c.path, c.body)
			code, msg := a.errorCode()
			if a.status != 503 || code != "unavailable" {
				t.Fatalf("HTTP %d %s; want 503 unavailable", a.status, a.body)
			}
			if ra := a.header.Get("Retry-After"); ra != "5" {
				t.Errorf("Retry-After %q, want 5", ra)
			}
			if c.path != "/readyz" && !strings.Contains(msg, "database cannot be reached") {
				t.Errorf("message %q does not say the database cannot be reached", msg)
			}
			if sc := a.header.Values("Set-Cookie"); len(sc) > 0 {
				t.Errorf("the answer sets cookies %q: a database outage must not log anyone out", sc)
			}
			// Connection refused is known at once; the lookup's own
			// bound is 5 s.
			if a.took > 6*time.Second {
				t.Errorf("answered after %v", a.took)
			}
		})
	}
	// What needs no database still answers as it should.
	if a := nobody.do("GET", "/api/v1/nodes", nil); a.status != 401 {
		t.Errorf("no credential with the database stopped: %d %s, want 401", a.status, a.body)
	}
	if a := nobody.do("GET", "/healthz", nil); a.status != 200 {
		t.Errorf("healthz with the database stopped: %d, want 200", a.status)
	}

	opts.Port = pg.Port()
	if _, err := pgcluster.Start(ctx, opts); err != nil {
		t.Fatalf("restart PostgreSQL: %v", err)
	}
	for _, c := range []apiClient{admin, browser} {
		deadline := time.Now().Add(15 * time.Second)
		for {
			a := c.do("GET", "/api/v1/whoami", nil)
			if a.status == 200 {
				break
			}
			if a.status != 503 || time.Now().After(deadline) {
				t.Fatalf("whoami after the restart: %d %s", a.status, a.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// A heavy read the database cancels at --reads.statement-timeout answers
// 504 with a JSON error saying what took too long and what to ask for
// instead, for a report (JSON or CSV), a series and evidence alike —
// while the routes on the primary's pool answer as ever. The reads wait on
// a lock here; the timeout counts that as any other slowness.
func TestReadPastStatementTimeoutAnswers504(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.DBURL = pgcluster.Database(t)
	cfg.Reads.StatementTimeout = time.Second
	admin, stop := startWithAdmin(t, cfg)
	defer stop()
	st, err := store.Open(ctx, cfg.DBURL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	node, err := st.UpsertNode(ctx, store.Node{Name: "web-1", Labels: map[string]string{"customer": "acme"}, InstanceID: 1, IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	// A metric the node reports, so the series and events routes get to
	// their reads.
	if _, err := st.UpsertDefinitions(ctx, node, []store.MetricDef{{Path: "drops", Title: "Drops", Unit: "drops/s", Kind: store.KindRate}}); err != nil {
		t.Fatal(err)
	}

	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE rollup_samples, rollup_histograms, reports, histograms, events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	from := url.QueryEscape(time.Now().Add(-399 * 24 * time.Hour).UTC().Format(time.RFC3339))
	cases := []struct {
		name, path, says string
	}{
		{"a 399-day report", "/api/v1/reports?from=" + from, "took longer than 1s"},
		{"the same as CSV", "/api/v1/reports?format=csv&from=" + from, "took longer than 1s"},
		{"a year's series", "/api/v1/nodes/web-1/series?metric=drops&from=" + from, "took longer than 1s"},
		{"evidence", "/api/v1/nodes/web-1/events?metric=drops", "reading the events took longer than 1s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			admin.t = t
			a := admin.do("GET", c.path, nil)
			code, msg := a.errorCode()
			if a.status != 504 || code != "timeout" || a.header.Get("Content-Type") != "application/json" {
				t.Fatalf("HTTP %d %s %s; want 504 timeout in JSON", a.status, a.header.Get("Content-Type"), a.body)
			}
			for _, want := range []string{c.says, "--reads.statement-timeout", "shorter period"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
			if a.header.Get("Retry-After") != "" {
				t.Errorf("Retry-After %q: the same request would time out again", a.header.Get("Retry-After"))
			}
			if a.took > 5*time.Second {
				t.Errorf("answered after %v, want about the 1s timeout", a.took)
			}
		})
	}
	admin.t = t
	// The primary's pool has no such timeout and is not held up.
	if a := admin.do("GET", "/api/v1/whoami", nil); a.status != 200 || a.took > time.Second {
		t.Errorf("whoami while reads time out: %d after %v", a.status, a.took)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if a := admin.do("GET", "/api/v1/reports?from="+from, nil); a.status != 200 {
		t.Errorf("the report once the lock is gone: %d %s", a.status, a.body)
	}
}
