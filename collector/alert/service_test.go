package alert

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert/notify/alertmanager"
	"github.com/nbs-project/nbs/collector/alert/notify/webhook"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/api/apitest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// receivers stands in for Alertmanager and a webhook endpoint.
type receivers struct {
	t      *testing.T
	secret []byte
	am     *httptest.Server
	hook   *httptest.Server
	// amPath and hookPath are where the receivers answer (see newReceivers).
	amPath, hookPath string

	mu       sync.Mutex
	posts    [][]alertmanager.Alert
	messages []webhook.Message
	failHook int // answer this many webhook requests with 503
	// whileAnswering runs once, before the first webhook message is
	// answered (after it is recorded as received).
	whileAnswering func()
}

func newReceivers(t *testing.T) *receivers {
	r := &receivers{t: t, secret: []byte("a test secret of 32 bytes, long!")}
	// Each receiver answers only under a path of its own: CI runs packages
	// in parallel, and a port this test's server takes may have been
	// another process's a moment ago (a real Prometheus still scraping it,
	// an Alertmanager still posting to it). Those strays are not the
	// collector's requests and must not fail this test.
	r.amPath, r.hookPath = "/am-"+rand.Text(), "/hook-"+rand.Text()
	r.am = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.HasPrefix(req.URL.Path, r.amPath+"/") {
			t.Logf("alertmanager receiver: ignoring a stray %s %s (%s)", req.Method, req.URL.Path, req.UserAgent())
			http.NotFound(w, req)
			return
		}
		var alerts []alertmanager.Alert
		if err := json.NewDecoder(req.Body).Decode(&alerts); err != nil {
			t.Errorf("alertmanager: decode: %v", err)
		}
		r.mu.Lock()
		r.posts = append(r.posts, alerts)
		r.mu.Unlock()
	}))
	r.hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != r.hookPath {
			t.Logf("webhook receiver: ignoring a stray %s %s (%s)", req.Method, req.URL.Path, req.UserAgent())
			http.NotFound(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		if err := webhook.Verify(r.secret, req.Header.Get(webhook.SignatureHeader), req.Header.Get(webhook.TimestampHeader), body, time.Now(), time.Minute); err != nil {
			t.Errorf("webhook: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.failHook > 0 {
			r.failHook--
			http.Error(w, "down for a moment", http.StatusServiceUnavailable)
			return
		}
		var m webhook.Message
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("webhook: decode: %v", err)
		}
		r.messages = append(r.messages, m)
		if f := r.whileAnswering; f != nil {
			r.whileAnswering = nil
			r.mu.Unlock()
			f()
			r.mu.Lock()
		}
	}))
	t.Cleanup(r.am.Close)
	t.Cleanup(r.hook.Close)
	return r
}

func (r *receivers) config(t *testing.T) Config {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, append(r.secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.AlertmanagerURLs, c.WebhookURL, c.WebhookSecretFile = URLList{r.am.URL + r.amPath}, r.hook.URL+r.hookPath, file
	c.ExternalURL, c.LeaderRetry = "https://nbs.example.com", 100*time.Millisecond
	return c
}

// events lists the webhook messages as "status:rule:node:metric".
func (r *receivers) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	for _, m := range r.messages {
		out = append(out, fmt.Sprintf("%s:%s:%s:%s", m.Status, m.Alert.Rule, m.Alert.Node, m.Alert.Metric))
	}
	return out
}

// lastAM returns the newest state Alertmanager was told about an alert.
func (r *receivers) lastAM(alertname, node string) (alertmanager.Alert, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last alertmanager.Alert
	n := 0
	for _, p := range r.posts {
		for _, a := range p {
			if a.Labels["alertname"] == alertname && a.Labels["node"] == node {
				last = a
				n++
			}
		}
	}
	return last, n
}

type fixture struct {
	st    *store.Store
	node  store.Node
	ids   map[string]int32
	seq   uint64
	clock time.Time
}

func newFixture(t *testing.T, db string) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	f := &fixture{st: st, node: store.Node{Name: "web-1", Labels: map[string]string{"customer": "acme"}, InstanceID: 1, IntervalMS: 1000},
		// In the past: the test runs faster than its reports, and reports dated
		// after the collector's clock are observed at its clock, not their own.
		clock: time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)}
	if f.node.ID, err = st.UpsertNode(ctx, f.node); err != nil {
		t.Fatal(err)
	}
	thr := &store.Threshold{Warn: 1, Crit: 10, Comparison: "above", HoldIntervals: 1}
	f.ids, err = st.UpsertDefinitions(ctx, f.node.ID, []store.MetricDef{
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: &store.Threshold{Warn: 20, Crit: 200, Comparison: "above"}},
		{Path: "tcp_reset/sent", Title: "Resets sent", Unit: "resets/s", Kind: store.KindRate},
		{Path: "tcp_reset/sent/no_socket", Title: "Sent: no_socket", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// report stores the next one-second report (root value and state, and the
// no_socket child when resets > 0) and runs the writer's hook.
func (f *fixture) report(t *testing.T, svc *Service, resets float64) {
	t.Helper()
	r := f.next(resets)
	if _, err := f.st.WriteReports(context.Background(), []store.Report{r}); err != nil {
		t.Fatal(err)
	}
	svc.OnStored([]store.Report{r})
}

// next is the next one-second report, not yet stored.
func (f *fixture) next(resets float64) store.Report {
	f.seq++
	f.clock = f.clock.Add(time.Second)
	st := store.StateOK
	if resets >= 10 {
		st = store.StateCrit
	}
	r := store.Report{NodeID: f.node.ID, InstanceID: 1, Seq: f.seq, Time: f.clock, IntervalMS: 1000,
		Samples: []store.Sample{{MetricID: f.ids["tcp_reset"], Path: "tcp_reset", Value: resets, State: st}}}
	if resets > 0 {
		r.Samples = append(r.Samples,
			store.Sample{MetricID: f.ids["tcp_reset/sent"], Path: "tcp_reset/sent", Value: resets, State: st},
			store.Sample{MetricID: f.ids["tcp_reset/sent/no_socket"], Path: "tcp_reset/sent/no_socket", Value: resets, State: st})
	}
	return r
}

type running struct {
	*Service
	metrics *telemetry.Metrics
	stop    func()
}

func start(t *testing.T, st *store.Store, cfg Config, name string) *running {
	t.Helper()
	return startWith(t, st, cfg, name, nil)
}

// startWith is start with a change to the service before it runs.
func startWith(t *testing.T, st *store.Store, cfg Config, name string, tweak func(*Service)) *running {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("svc", name)
	m := telemetry.New()
	svc, err := New(st, cfg, log, m)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(svc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &running{Service: svc, metrics: m, stop: stop}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func waitFor(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after %s: %s", timeout, last)
}

func waitLeading(t *testing.T, svc *running) {
	t.Helper()
	waitFor(t, 5*time.Second, func() string {
		if !svc.Leading() {
			return "service never took the alert lead"
		}
		return ""
	})
}

// The default rule pages once through both targets with the right labels
// and annotations, survives a restart without paging again, and delivers
// the resolve after it.
func TestAlertServiceFiresOnceAcrossRestart(t *testing.T) {
	rcv := newReceivers(t)
	f := newFixture(t, pgcluster.Database(t))
	cfg := rcv.config(t)
	svc := start(t, f.st, cfg, "first")
	waitLeading(t, svc)

	f.report(t, svc.Service, 0)
	f.report(t, svc.Service, 187)
	time.Sleep(200 * time.Millisecond)
	if ev := rcv.events(); len(ev) != 0 {
		t.Fatalf("paged after one CRIT report: %v", ev)
	}
	f.report(t, svc.Service, 187)
	waitFor(t, 3*time.Second, func() string {
		if ev := rcv.events(); len(ev) != 1 || ev[0] != "firing:NBSRootCritical:web-1:tcp_reset/sent/no_socket" {
			return fmt.Sprintf("webhook events %v", ev)
		}
		if _, n := rcv.lastAM("NBSRootCritical", "web-1"); n == 0 {
			return "nothing posted to alertmanager"
		}
		return ""
	})
	a, _ := rcv.lastAM("NBSRootCritical", "web-1")
	wantLabels := map[string]string{"alertname": "NBSRootCritical", "severity": "critical", "node": "web-1", "root": "tcp_reset",
		"metric": "tcp_reset/sent/no_socket", "customer": "acme"}
	if fmt.Sprint(a.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("alertmanager labels %v, want %v", a.Labels, wantLabels)
	}
	if want := "https://nbs.example.com/nodes/web-1?"; a.GeneratorURL != a.Annotations["tree_url"] || !strings.HasPrefix(a.GeneratorURL, want) ||
		!strings.Contains(a.GeneratorURL, "metric=tcp_reset%2Fsent%2Fno_socket") || !strings.Contains(a.GeneratorURL, "&from=") {
		t.Errorf("links %q / %q, want %q with the metric and the breach window", a.GeneratorURL, a.Annotations["tree_url"], want)
	}
	if a.Annotations["threshold"] != "warn 1 resets/s, crit 10 resets/s" {
		t.Errorf("threshold annotation %q, want it in the metric's unit", a.Annotations["threshold"])
	}
	for _, want := range []string{"187 resets/s", "crit 10 resets/s", "tcp_reset is CRIT at 187 resets/s"} {
		if !strings.Contains(a.Annotations["description"], want) {
			t.Errorf("description %q lacks %q", a.Annotations["description"], want)
		}
	}
	if a.Annotations["summary"] != "tcp_reset is CRIT on web-1: tcp_reset/sent/no_socket at 187 resets/s" {
		t.Errorf("summary %q", a.Annotations["summary"])
	}
	if until := time.Until(a.EndsAt); until < 3*time.Minute || until > 5*time.Minute {
		t.Errorf("firing endsAt %s ahead, want about %d resend intervals", until, resendFactor)
	}
	startsAt := a.StartsAt

	// Restart mid-alert: the new term re-posts to Alertmanager (same
	// labels, same startsAt) and sends nothing new to the webhook.
	svc.stop()
	_, before := rcv.lastAM("NBSRootCritical", "web-1")
	svc = start(t, f.st, cfg, "second")
	waitLeading(t, svc)
	f.report(t, svc.Service, 150)
	waitFor(t, 3*time.Second, func() string {
		if _, n := rcv.lastAM("NBSRootCritical", "web-1"); n <= before {
			return "the new leader did not re-post the firing alert"
		}
		return ""
	})
	if a, _ := rcv.lastAM("NBSRootCritical", "web-1"); !a.StartsAt.Equal(startsAt) || a.Labels["metric"] != "tcp_reset/sent/no_socket" {
		t.Errorf("re-post after restart: startsAt %s (was %s), labels %v", a.StartsAt, startsAt, a.Labels)
	}
	f.report(t, svc.Service, 0)
	waitFor(t, 3*time.Second, func() string {
		ev := rcv.events()
		want := []string{"firing:NBSRootCritical:web-1:tcp_reset/sent/no_socket", "resolved:NBSRootCritical:web-1:tcp_reset/sent/no_socket"}
		if fmt.Sprint(ev) != fmt.Sprint(want) {
			return fmt.Sprintf("webhook events %v, want %v", ev, want)
		}
		if a, _ := rcv.lastAM("NBSRootCritical", "web-1"); a.EndsAt.IsZero() || a.EndsAt.After(time.Now()) {
			return fmt.Sprintf("alertmanager was not told of the resolve: endsAt %s", a.EndsAt)
		}
		return ""
	})
}

// With two collectors, reports stored by the follower reach the leader
// through NOTIFY; the alert fires once; when the leader dies the follower
// takes over and delivers the resolve.
func TestAlertServiceFailover(t *testing.T) {
	rcv := newReceivers(t)
	db := pgcluster.Database(t)
	f := newFixture(t, db)
	cfg := rcv.config(t)
	a := start(t, f.st, cfg, "a")
	waitLeading(t, a)
	b := start(t, f.st, cfg, "b")
	time.Sleep(300 * time.Millisecond)
	if b.Leading() {
		t.Fatal("two leaders")
	}
	start := time.Now()
	for range 2 {
		f.report(t, b.Service, 50) // the agent's stream is on b
	}
	waitFor(t, 3*time.Second, func() string {
		if ev := rcv.events(); len(ev) != 1 {
			return fmt.Sprintf("webhook events %v, want one firing", ev)
		}
		return ""
	})
	t.Logf("fired %s after the second report via the follower", time.Since(start))
	if m := scrape(t, a.metrics); m[readMemory] != 0 || m[readDatabase] != 2 {
		t.Errorf("the leader read %v reports from memory and %v from the database; want the follower's two from the database",
			m[readMemory], m[readDatabase])
	}
	a.stop()
	waitLeading(t, b)
	f.report(t, b.Service, 0)
	waitFor(t, 3*time.Second, func() string {
		if ev := rcv.events(); len(ev) != 2 || !strings.HasPrefix(ev[1], "resolved:") {
			return fmt.Sprintf("webhook events %v, want firing then resolved", ev)
		}
		return ""
	})
}

// The leader is stopped while the webhook receiver holds its firing and
// has not answered yet: the send finishes, is recorded as delivered before
// the term's lock is released, and the successor sends only the resolve.
func TestAlertLeaderStoppedMidDeliveryNotifiesOnce(t *testing.T) {
	rcv := newReceivers(t)
	f := newFixture(t, pgcluster.Database(t))
	cfg := rcv.config(t)
	a := start(t, f.st, cfg, "a")
	waitLeading(t, a)
	b := start(t, f.st, cfg, "b")
	stopped := make(chan struct{})
	rcv.whileAnswering = func() {
		go func() { a.stop(); close(stopped) }()
		// The term's context is cancelled while the request is open.
		waitFor(t, 3*time.Second, func() string {
			if a.Leading() {
				return "a still leads"
			}
			return ""
		})
	}
	for range 2 {
		f.report(t, b.Service, 50)
	}
	<-stopped
	waitLeading(t, b)
	f.report(t, b.Service, 0)
	waitFor(t, 5*time.Second, func() string {
		if ev := rcv.events(); len(ev) < 2 || !strings.HasPrefix(ev[len(ev)-1], "resolved:") {
			return fmt.Sprintf("webhook events %v, want firing then resolved", ev)
		}
		return ""
	})
	if ev := rcv.events(); len(ev) != 2 {
		t.Errorf("webhook events %v: the successor sent the firing again", ev)
	}
}

// A webhook that fails is retried with backoff until it answers; the delivery
// log records the attempts.
func TestAlertServiceRetriesWebhook(t *testing.T) {
	rcv := newReceivers(t)
	rcv.failHook = 2
	f := newFixture(t, pgcluster.Database(t))
	svc := start(t, f.st, rcv.config(t), "only")
	waitLeading(t, svc)
	for range 3 {
		f.report(t, svc.Service, 20)
	}
	waitFor(t, 10*time.Second, func() string {
		if ev := rcv.events(); len(ev) != 1 {
			return fmt.Sprintf("webhook events %v after failures, want the firing delivered", ev)
		}
		return ""
	})
	// The log is written once the receiver's answer is in, a moment after
	// the receiver has the event.
	waitFor(t, 5*time.Second, func() string {
		var attempts int
		var status string
		if err := f.st.Pool().QueryRow(context.Background(), `SELECT attempts, status FROM alert_deliveries WHERE target = 'webhook'`).Scan(&attempts, &status); err != nil {
			return err.Error()
		}
		if attempts != 3 || status != "delivered" {
			return fmt.Sprintf("delivery log: %d attempts, %s; want 3, delivered", attempts, status)
		}
		return ""
	})
}

func TestAlertRulesAPI(t *testing.T) {
	f := newFixture(t, pgcluster.Database(t))
	cfg := DefaultConfig()
	cfg.ExternalURL = "http://nbs"
	svc, err := New(f.st, cfg, slog.New(slog.DiscardHandler), telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	acc, err := access.New(nil, access.Config{Mode: access.ModeNone}, nil) // everyone is admin
	if err != nil {
		t.Fatal(err)
	}
	r.Mount(api.Prefix, api.V1(api.Routes(api.Parts{Alerts: svc}), acc))
	srv := httptest.NewServer(r)
	defer srv.Close()
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	// Every answer must also be what openapi.json says.
	idPath := regexp.MustCompile(`^/(alert-rules|alerts)/[^/]+$`)
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+"/api/v1"+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		pattern := idPath.ReplaceAllString(strings.SplitN(path, "?", 2)[0], "/$1/{id}")
		if err := doc.CheckResponse(method, pattern, resp.StatusCode, b); err != nil {
			t.Error(err)
		}
		return resp.StatusCode, string(b)
	}
	// The default exists from the migration.
	code, body := do("GET", "/alert-rules", "")
	if code != 200 || !strings.Contains(body, `"name": "NBSRootCritical"`) || !strings.Contains(body, `"builtin": true`) || !strings.Contains(body, `"for_intervals": 2`) {
		t.Fatalf("GET rules: %d %s", code, body)
	}
	var listed struct{ Rules []Rule }
	json.Unmarshal([]byte(body), &listed)
	if i := slices.IndexFunc(listed.Rules, func(r Rule) bool { return r.Name == "NBSNodeSilent" }); i < 0 ||
		listed.Rules[i].Kind != KindSilent || listed.Rules[i].ForSeconds != 180 || !listed.Rules[i].Enabled || !listed.Rules[i].Builtin {
		t.Errorf("default silent rule missing or not as documented (kind silent, 180 s, enabled, builtin): %s", body)
	}
	bad := []struct{ body, want string }{
		{`{"name":"X","state":"crit","severity":"critical"}`, "give for_intervals"},
		{`{"name":"X","state":"crit","for_intervals":1,"severity":"critical","kind":"group"}`, "needs min_nodes"},
		{`{"name":"X","bogus":1}`, "unknown field"},
		{`[]`, "request body"},
	}
	for _, b := range bad {
		if code, body := do("POST", "/alert-rules", b.body); code != 400 || !strings.Contains(body, b.want) || !strings.Contains(body, `"bad_request"`) {
			t.Errorf("POST %s: %d %s; want 400 mentioning %q", b.body, code, body, b.want)
		}
	}
	code, body = do("POST", "/alert-rules", `{"name":"AcmeWarn","kind":"group","state":"warn","for_seconds":60,"severity":"warning","selector":{"customer":"acme"},"min_percent":25}`)
	if code != 201 {
		t.Fatalf("POST group rule: %d %s", code, body)
	}
	var created Rule
	json.Unmarshal([]byte(body), &created)
	if !created.Enabled || created.Metric != "*" {
		t.Errorf("created %+v: want enabled, metric * by default", created)
	}
	if code, body := do("POST", "/alert-rules", `{"name":"AcmeWarn","state":"crit","for_intervals":1,"severity":"critical"}`); code != 409 {
		t.Errorf("duplicate name: %d %s, want 409", code, body)
	}
	if code, body := do("PUT", fmt.Sprintf("/alert-rules/%d", created.ID), `{"name":"AcmeWarn","kind":"group","state":"crit","for_seconds":60,"severity":"warning","min_nodes":2,"enabled":false}`); code != 200 || !strings.Contains(body, `"enabled": false`) {
		t.Errorf("PUT: %d %s", code, body)
	}
	if code, _ := do("PUT", "/alert-rules/999", `{"name":"Y","state":"crit","for_intervals":1,"severity":"critical"}`); code != 404 {
		t.Errorf("PUT unknown: %d, want 404", code)
	}
	if code, _ := do("GET", "/alert-rules/abc", ""); code != 400 {
		t.Errorf("GET /alert-rules/abc: %d, want 400", code)
	}
	if code, _ := do("DELETE", fmt.Sprintf("/alert-rules/%d", created.ID), ""); code != 204 {
		t.Errorf("DELETE: %d, want 204", code)
	}
	if code, _ := do("DELETE", fmt.Sprintf("/alert-rules/%d", created.ID), ""); code != 404 {
		t.Errorf("second DELETE: %d, want 404", code)
	}
	if code, body := do("GET", "/alerts?state=burning", ""); code != 400 || !strings.Contains(body, "state") {
		t.Errorf("GET alerts?state=burning: %d %s", code, body)
	}
	if code, body := do("GET", "/alerts", ""); code != 200 || !strings.Contains(body, `"alerts": []`) || !strings.Contains(body, `"evaluator"`) {
		t.Errorf("GET alerts: %d %s", code, body)
	}
	// Filters no node or rule could match are mistakes, not empty lists.
	for _, c := range []struct{ q, names string }{
		{"node=-x", "node"}, {"node=" + strings.Repeat("n", 100000), "node"}, {"rule=1bad", "rule"},
		{"rule=" + strings.Repeat("r", 200), "rule"}, {"limit=0", "limit"}, {"limit=1001", "from 1 to 1000"},
		{"cursor=abc", "cursor"}, {"cursor=" + strings.Repeat("A", 5000), "cursor"},
		{"cursor=" + url.QueryEscape(alertCursor{StateRank: 7, ID: 1}.String()), "cursor"},
		{"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("a1.0.0.1; DROP TABLE alert_instances")), "cursor"}, {"groups=yes", "groups"},
	} {
		if code, body := do("GET", "/alerts?"+c.q, ""); code != 400 || len(body) > 1000 || !strings.Contains(body, c.names) {
			t.Errorf("GET alerts?%.30s: %d %.200s, want a short 400 naming %s", c.q, code, body, c.names)
		}
	}
	// Paging: total, totals, limit and next_cursor, whatever the page.
	if code, body := do("GET", "/alerts?limit=1&groups=true&cursor="+url.QueryEscape(alertCursor{ID: 1}.String()), ""); code != 200 ||
		!strings.Contains(body, `"total": 0`) || !strings.Contains(body, `"totals": {`) || !strings.Contains(body, `"limit": 1`) ||
		!strings.Contains(body, `"groups": []`) || !strings.Contains(body, `"groups_total": 0`) || strings.Contains(body, "next_cursor") {
		t.Errorf("GET alerts?limit=1&groups=true&cursor=…: %d %s", code, body)
	}
	if code, body := do("GET", "/alerts/12345", ""); code != 404 || !strings.Contains(body, "alert 12345: not found") {
		t.Errorf("GET unknown alert: %d %s", code, body)
	}
	if code, body := do("GET", "/alert-rules/1", ""); code != 200 || !strings.Contains(body, `"name": "NBSRootCritical"`) {
		t.Errorf("GET rule 1: %d %s", code, body)
	}

	// Each change is in the audit log with the rule before and after; the
	// refused ones (bad, duplicate, unknown) are not.
	rows, err := f.st.Pool().Query(context.Background(), `SELECT action, object_id, coalesce(old_value->>'state', '-'),
		coalesce(new_value->>'state', '-') FROM audit_log WHERE object_kind = 'alert_rule' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var a, id, old, cur string
		err := r.Scan(&a, &id, &old, &cur)
		return strings.Join([]string{a, id, old, cur}, " "), err
	})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(created.ID)
	if want := []string{"create " + id + " - warn", "update " + id + " warn crit", "delete " + id + " crit -"}; !slices.Equal(got, want) {
		t.Errorf("audit log %q, want %q", got, want)
	}
}

// scrape reads a registry's /metrics as the collector serves it, by series
// (name and labels as exposed).
func scrape(t testing.TB, m *telemetry.Metrics) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// Alerting reports on /metrics as Alertmanager does: notifications and
// failures per integration, their latency, the alerts held, and whether
// this collector leads.
func TestAlertServiceMetrics(t *testing.T) {
	rcv := newReceivers(t)
	rcv.failHook = 1
	f := newFixture(t, pgcluster.Database(t))
	svc := start(t, f.st, rcv.config(t), "only")
	waitLeading(t, svc)
	const (
		sent     = `nbs_collector_alert_notifications_total{integration="%s"}`
		failed   = `nbs_collector_alert_notifications_failed_total{integration="%s"}`
		latency  = `nbs_collector_alert_notification_latency_seconds_count{integration="%s"}`
		firing   = `nbs_collector_alerts{state="firing"}`
		leading  = `nbs_collector_alert_leader`
		evalFail = `nbs_collector_alert_evaluation_failures_total`
	)
	before := scrape(t, svc.metrics)
	for _, series := range []string{fmt.Sprintf(sent, "webhook"), fmt.Sprintf(failed, "webhook"), firing, evalFail} {
		if v, ok := before[series]; !ok || v != 0 {
			t.Errorf("before any alert: %s = %v (exposed %v), want 0", series, v, ok)
		}
	}
	if before[leading] != 1 {
		t.Errorf("%s = %v while leading, want 1", leading, before[leading])
	}
	for range 3 {
		f.report(t, svc.Service, 20)
	}
	waitFor(t, 10*time.Second, func() string {
		m := scrape(t, svc.metrics)
		want := map[string]float64{fmt.Sprintf(sent, "webhook"): 2, fmt.Sprintf(failed, "webhook"): 1,
			fmt.Sprintf(latency, "webhook"): 2, fmt.Sprintf(failed, "alertmanager"): 0, firing: 1, evalFail: 0}
		for series, v := range want {
			if m[series] != v {
				return fmt.Sprintf("%s = %v, want %v", series, m[series], v)
			}
		}
		if m[fmt.Sprintf(sent, "alertmanager")] < 1 || m[fmt.Sprintf(latency, "alertmanager")] != m[fmt.Sprintf(sent, "alertmanager")] {
			return fmt.Sprintf("alertmanager: %v notifications, %v timed; want at least one, each timed",
				m[fmt.Sprintf(sent, "alertmanager")], m[fmt.Sprintf(latency, "alertmanager")])
		}
		return ""
	})
	svc.stop()
	after := scrape(t, svc.metrics)
	if after[leading] != 0 || after[firing] != 0 {
		t.Errorf("after stopping: %s = %v, %s = %v; want 0 (only the leader holds alerts)", leading, after[leading], firing, after[firing])
	}
}
