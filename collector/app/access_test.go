package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/api/apitest"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/nodeconfig"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// callers of the access test, in the order of every want below.
var callerNames = [...]string{"none", "viewer", "operator", "admin", "acme", "globex"}

const (
	none = iota
	viewer
	operator
	admin
	acme
	globex
	nCallers
)

// want is the status each caller gets.
type want [nCallers]int

// fleet is a collector's HTTP side over a real database with two
// customers' nodes — acme-web (customer=acme) and globex-db
// (customer=globex) — their reports, evidence, alerts and threshold
// overrides, and a token of every role.
type fleet struct {
	t      *testing.T
	st     *store.Store
	acc    *access.Access
	router chi.Routes
	srv    *httptest.Server
	// identities answers the node identity routes.
	identities *nodeauth.Admin
	tokens     [nCallers]string
	// Objects that belong to one customer.
	acmeAlert, globexAlert, groupAlert int64
	overrides                          map[string]int64 // by a name of the test's
	// Saved report definitions of acme's and globex's, and one of all nodes.
	acmeReport, globexReport, fleetReport int64
}

func newFleet(t *testing.T, cfg access.Config) *fleet {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, pgcluster.Database(t), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	f := &fleet{t: t, st: st, overrides: map[string]int64{}}

	// Two nodes through the store's own writes, each with a report (so the
	// fleet view has roots and states) and evidence.
	now := time.Now().Truncate(time.Millisecond)
	nodeIDs := map[string]int32{}
	for i, n := range []store.Node{
		{Name: "acme-web", Labels: map[string]string{"customer": "acme", "rack": "r1"}, InstanceID: 1, IntervalMS: 1000, AgentVersion: "acme-agent"},
		{Name: "globex-db", Labels: map[string]string{"customer": "globex", "rack": "r1"}, InstanceID: 2, IntervalMS: 1000, AgentVersion: "globex-agent"},
	} {
		id, err := st.UpsertNode(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		nodeIDs[n.Name] = id
		thr := &store.Threshold{Warn: 1, Crit: 10, Comparison: "above", HoldIntervals: 1}
		ids, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{
			{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
			{Path: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, InstanceID: n.InstanceID, Seq: 1, Time: now.Add(-time.Second), IntervalMS: 1000,
			Samples: []store.Sample{{MetricID: ids["tcp_reset"], Path: "tcp_reset", Value: float64(5 + i), State: store.StateWarn},
				{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Value: float64(5 + i), State: store.StateWarn}},
			Events: []store.Event{{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Time: now.Add(-time.Second),
				// One flow seen from both nodes: each is the other's
				// counterpart, for whoever may see both.
				Fields: map[string]string{"saddr": n.Name + ".example", "reason": "no_socket", "src": "192.0.2.2:443", "dst": "192.0.2.1:40000"}}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	// An alert on each node, one delivered to a receiver, and a group
	// alert, which counts nodes of every tenant.
	alertRow := func(fp, kind, node string, nodeID *int32, group, labels string) int64 {
		var id int64
		// The rule's runbook is staff's; the summary is everyone's.
		if err := st.Pool().QueryRow(ctx, `INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, node_id, node,
				metric, group_key, state, since, last_ts, fired_at, labels, annotations)
			VALUES ($1, 1, 'NBSRootCritical', $2, 'critical', $3, $4, 'tcp_reset', $5, 'firing', now(), now(), now(), $6,
				'{"summary": "resets", "runbook_url": "https://wiki.internal/runbooks/resets"}') RETURNING id`,
			fp, kind, nodeID, node, group, labels).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	acmeID, globexID := nodeIDs["acme-web"], nodeIDs["globex-db"]
	f.acmeAlert = alertRow("fp-acme", "node", "acme-web", &acmeID, `{}`, `{"node":"acme-web","customer":"acme"}`)
	f.globexAlert = alertRow("fp-globex", "node", "globex-db", &globexID, `{}`, `{"node":"globex-db","customer":"globex"}`)
	f.groupAlert = alertRow("fp-group", "group", "", nil, `{"rack":"r1"}`, `{"rack":"r1","nodes":"acme-web,globex-db"}`)
	if _, err := st.Pool().Exec(ctx, `INSERT INTO alert_deliveries (instance_id, target, url, event, payload)
		VALUES ($1, 'webhook', 'https://hooks.internal/nbs?key=s3cret', 'firing', '{}')`, f.acmeAlert); err != nil {
		t.Fatal(err)
	}

	if cfg.Mode == "" {
		cfg.Mode = access.ModeToken
	}
	if f.acc, err = access.New(st.Pool(), cfg, log); err != nil {
		t.Fatal(err)
	}
	configs := nodeconfig.New(st, log)
	alertCfg := alert.DefaultConfig()
	alertCfg.ExternalURL = "http://nbs.test"
	alerts, err := alert.New(st, alertCfg, log, telemetry.New())
	if err != nil {
		t.Fatal(err)
	}
	ui := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<div id="app"></div>`)
	})
	f.identities = nodeauth.NewAdmin(st, noneConnected{}, nodeauth.ModeEnroll, "", log)
	h := httpHandler(st, noneConnected{}, configs, api.Parts{NodeConfig: configs, Alerts: alerts, Identities: f.identities,
		Reports: report.New(st, st.Pool(), log)}, f.acc, ui, log, telemetry.New(), handlerOptions{})
	f.router = h.(chi.Routes)
	f.srv = httptest.NewUnstartedServer(h)
	f.srv.Config.ConnContext = access.ConnContext
	f.srv.Start()
	t.Cleanup(f.srv.Close)

	// A token of every role, made as the token command makes them.
	adminCtx := access.WithPrincipal(ctx, access.Principal{Name: "test", Role: access.RoleAdmin, Via: access.ViaCLI})
	for c, n := range map[int]access.NewToken{
		viewer:   {Name: "vic", Role: access.RoleViewer},
		operator: {Name: "olga", Role: access.RoleOperator},
		admin:    {Name: "ada", Role: access.RoleAdmin},
		acme:     {Name: "acme-portal", Role: access.RoleCustomer, Selector: access.Selector{"customer": "acme"}},
		globex:   {Name: "globex-portal", Role: access.RoleCustomer, Selector: access.Selector{"customer": "globex"}},
	} {
		if f.tokens[c], _, err = f.acc.CreateToken(adminCtx, n); err != nil {
			t.Fatal(err)
		}
	}

	// Overrides of every scope, through the API as an operator.
	for name, body := range map[string]string{
		"global":      `{"scope":{"kind":"global"},"metric":"tcp_reset","threshold":{"warn":2,"crit":20,"comparison":"above","hold_intervals":1}}`,
		"acme":        `{"scope":{"kind":"selector","selector":{"customer":"acme"}},"metric":"tcp_reset","threshold":{"warn":3,"crit":30,"comparison":"above","hold_intervals":1}}`,
		"globex":      `{"scope":{"kind":"selector","selector":{"customer":"globex"}},"metric":"tcp_reset","threshold":{"warn":4,"crit":40,"comparison":"above","hold_intervals":1}}`,
		"acme-node":   `{"scope":{"kind":"node","node":"acme-web"},"metric":"tcp_reset/sent","threshold":{"warn":5,"crit":50,"comparison":"above","hold_intervals":1}}`,
		"globex-node": `{"scope":{"kind":"node","node":"globex-db"},"metric":"tcp_reset/sent","threshold":{"warn":6,"crit":60,"comparison":"above","hold_intervals":1}}`,
		"shared-rack": `{"scope":{"kind":"selector","selector":{"rack":"r1"}},"metric":"tcp_reset/sent","disabled":true}`,
	} {
		f.overrides[name] = f.create("PUT", "/thresholds", body, 200)
	}
	// Overrides whose scope has no node: the API refuses to make them, but
	// they remain when their nodes go (deleted, renamed), and must stay as
	// hidden from customers as any other tenant's.
	for name, scope := range map[string][]string{
		"no-such-node":  {"node", `{}`, "gone-1"},
		"other-tenants": {"selector", `{"customer":"initech"}`, ""},
	} {
		var id int64
		if err := st.Pool().QueryRow(ctx, `INSERT INTO threshold_overrides (scope_kind, selector, node, metric, disabled)
			VALUES ($1, $2, $3, 'tcp_reset', true) RETURNING id`, scope[0], scope[1], scope[2]).Scan(&id); err != nil {
			t.Fatal(err)
		}
		f.overrides[name] = id
	}
	f.acmeReport = f.create("POST", "/report-definitions", `{"name":"acme weekly","selector":{"customer":"acme"},"period":"7d"}`, 201)
	f.globexReport = f.create("POST", "/report-definitions", `{"name":"globex daily","selector":{"customer":"globex"},"period":"1d"}`, 201)
	f.fleetReport = f.create("POST", "/report-definitions", `{"name":"fleet monthly","period":"30d","objectives":[{"name":"ping p99 < 5 ms per hour","metric":"ping","quantile":0.99,"below_ms":5,"per":"hour"}]}`, 201)
	return f
}

// do calls the collector as a caller and returns the status and body.
func (f *fleet) do(caller int, method, path, body string, header ...string) (int, http.Header, string) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := f.tokens[caller]; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// create makes something as an admin through the API and returns its id.
func (f *fleet) create(method, path, body string, status int) int64 {
	f.t.Helper()
	code, _, out := f.do(admin, method, api.Prefix+path, body)
	if code != status {
		f.t.Fatalf("%s %s: %d %s, want %d", method, path, code, out, status)
	}
	var v struct {
		ID   int64 `json:"id"`
		Info struct {
			ID int64 `json:"id"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		f.t.Fatalf("%s %s: %v in %s", method, path, err, out)
	}
	return max(v.ID, v.Info.ID)
}

// routes walks the router the collector serves: "METHOD /api/v1/…" for
// the route table, and "* /path" for what is outside it (chi registers
// those for every method).
func (f *fleet) routes() []string {
	f.t.Helper()
	seen := map[string]bool{}
	err := chi.Walk(f.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(route, api.Prefix+"/") {
			method = "*"
		}
		seen[method+" "+route] = true
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// call is how the access test calls a route as one caller: the path (its
// parameters filled), the body, and the status it must get.
type call struct {
	path func(caller int) string
	body func(caller int) string
	want want
}

func fixed(s string) func(int) string { return func(int) string { return s } }

// enrolledNode makes a fresh enrolled node name per call (what delete acts
// on) and puts it into format.
func enrolledNode(f *fleet, format string) func(int) string {
	return func(c int) string {
		name := fmt.Sprintf("enrolled-%d-%d", c, time.Now().UnixNano())
		if _, err := f.identities.Enroll(context.Background(), name, false, nil); err != nil {
			f.t.Fatalf("enroll %s: %v", name, err)
		}
		return fmt.Sprintf(format, name)
	}
}

// revokedNode makes a fresh revoked node name per call (what re-enroll and
// delete act on) and puts it into format.
func revokedNode(f *fleet, format string) func(int) string {
	return func(c int) string {
		name := fmt.Sprintf("gone-%d-%d", c, time.Now().UnixNano())
		if err := f.identities.Revoke(context.Background(), name); err != nil {
			f.t.Fatalf("revoke %s: %v", name, err)
		}
		return fmt.Sprintf(format, name)
	}
}

// TestAccess calls every route of the collector's router as every kind of
// caller and checks the status, that the answer is what openapi.json says,
// and that it carries the browser protections. The routes come from the
// router itself: a route without an entry here fails the test.
func TestAccess(t *testing.T) {
	f := newFleet(t, access.Config{})
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	// What only staff may see: fields openapi.json marks x-nbs-staff, and
	// what else the handlers strip for customers.
	staff := append(doc.StaffFields(), "holder", "runbook_url", "deliveries")
	if !slices.Contains(staff, "evaluator") || !slices.Contains(staff, "created_by") {
		t.Fatalf("openapi.json marks %v as staff's; evaluator and created_by at least", staff)
	}
	calls := accessCalls(f)
	served := f.routes()
	if len(served) < 29 {
		t.Fatalf("walked only %d routes: %v", len(served), served)
	}
	for _, route := range served {
		c, ok := calls[route]
		if !ok {
			t.Errorf("%s is served but the access test has no entry for it: add one with the status every caller must get", route)
			continue
		}
		method, pattern, _ := strings.Cut(route, " ")
		if method == "*" {
			method = http.MethodGet
		}
		for caller := range nCallers {
			t.Run(route+" as "+callerNames[caller], func(t *testing.T) {
				path := c.path(caller)
				code, h, body := f.do(caller, method, path, c.body(caller))
				if code != c.want[caller] {
					t.Fatalf("%s %s as %s: HTTP %d %.300s; want %d", method, path, callerNames[caller], code, body, c.want[caller])
				}
				for _, hdr := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} {
					if h.Get(hdr) == "" {
						t.Errorf("%s %s: no %s", method, path, hdr)
					}
				}
				if rel, ok := strings.CutPrefix(pattern, api.Prefix); ok {
					if err := doc.CheckResponse(method, rel, code, []byte(body)); err != nil {
						t.Error(err)
					}
				}
				if caller == acme || caller == globex {
					for _, leak := range staffLeaks(body, staff) {
						t.Errorf("%s %s as %s: a customer's answer holds the staff field %s: %.300s", method, path, callerNames[caller], leak, body)
					}
					// Collector flags are staff's vocabulary too.
					if m := cliFlag.FindString(body); m != "" && route != "GET "+api.Prefix+"/openapi.json" {
						t.Errorf("%s %s as %s: a customer's answer names the collector flag %s: %.300s", method, path, callerNames[caller], m, body)
					}
				}
			})
		}
	}
	for route := range calls {
		if !slices.Contains(served, route) {
			t.Errorf("the access test expects %s, which is not served", route)
		}
	}
}

// accessCalls is how the access test calls each route the collector
// serves, by "METHOD pattern" as fleet.routes names them: the path, the
// body, and the status every caller must get. Other tests walk the same
// table, so that a new route is covered by each of them once it is here.
func accessCalls(f *fleet) map[string]call {
	const (
		// none, viewer, operator, admin, acme, globex
		ok, created, accepted, gone = 200, 201, 202, 204
		unauth, forbid, hidden      = 401, 403, 404
	)
	staffRead := want{unauth, ok, ok, ok, hidden, hidden}
	acmeNodeRead := want{unauth, ok, ok, ok, ok, hidden}
	everyoneRead := want{unauth, ok, ok, ok, ok, ok}
	operatorWrite := func(status int) want { return want{unauth, forbid, status, status, hidden, hidden} }
	adminOnly := func(status int) want { return want{unauth, forbid, forbid, status, hidden, hidden} }
	open := want{ok, ok, ok, ok, ok, ok}
	// Something fresh per caller, for the calls that delete or change it.
	fresh := func(make func(caller int) int64, format string) func(int) string {
		return func(c int) string { return fmt.Sprintf(format, make(c)) }
	}
	ruleBody := func(c int) string {
		return fmt.Sprintf(`{"name":"AccessRule%d","state":"crit","for_intervals":1,"severity":"critical"}`, c)
	}
	freshRule := func(c int) int64 {
		return f.create("POST", "/alert-rules", fmt.Sprintf(`{"name":"Fresh%d%d","state":"crit","for_intervals":1,"severity":"critical"}`, c, time.Now().UnixNano()), 201)
	}
	// Stored directly: the API makes overrides only for metrics some node
	// has, and these must not change any node's thresholds.
	freshOverride := func(c int) int64 {
		var id int64
		if err := f.st.Pool().QueryRow(context.Background(), `INSERT INTO threshold_overrides (scope_kind, selector, node, metric, disabled)
			VALUES ('global', '{}', '', $1, true) ON CONFLICT (scope_kind, selector, node, metric) DO UPDATE SET disabled = true
			RETURNING id`, fmt.Sprintf("tcp_reset/fresh_%d", c)).Scan(&id); err != nil {
			f.t.Fatal(err)
		}
		return id
	}
	freshReport := func(c int) int64 {
		return f.create("POST", "/report-definitions", fmt.Sprintf(`{"name":"fresh %d","selector":{"customer":"acme"},"period":"1d"}`, c), 201)
	}
	reportBody := func(c int) string {
		return fmt.Sprintf(`{"name":"made by %d","selector":{"customer":"acme"},"period":"custom","from":"2026-11-01T00:00:00Z","to":"2026-11-02T00:00:00Z","targets":["peer:acme-2"]}`, c)
	}
	freshToken := func(c int) int64 {
		return f.create("POST", "/tokens", fmt.Sprintf(`{"name":"fresh-%d-%d","role":"viewer"}`, c, time.Now().UnixNano()), 201)
	}
	// An alert of acme-web with a silence of its own, to end.
	freshSilenced := func(c int) int64 {
		var id int64
		ctx := context.Background()
		if err := f.st.Pool().QueryRow(ctx, `INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, node_id, node,
				metric, state, since, last_ts, fired_at)
			SELECT $1, 1, 'NBSRootCritical', 'node', 'critical', node_id, node, metric, 'firing', now(), now(), now()
			FROM alert_instances WHERE id = $2 RETURNING id`, fmt.Sprintf("fp-silenced-%d-%d", c, time.Now().UnixNano()), f.acmeAlert).Scan(&id); err != nil {
			f.t.Fatal(err)
		}
		if _, err := f.st.Pool().Exec(ctx, `INSERT INTO alert_silences (fingerprint, instance_id, ends_at, created_by)
			SELECT fingerprint, id, now() + interval '1 hour', 'test' FROM alert_instances WHERE id = $1`, id); err != nil {
			f.t.Fatal(err)
		}
		return id
	}
	p := api.Prefix
	calls := map[string]call{
		"* /healthz": {fixed("/healthz"), fixed(""), open},
		"* /readyz":  {fixed("/readyz"), fixed(""), open},
		"* /metrics": {fixed("/metrics"), fixed(""), open}, // --metrics.auth is off by default
		"* /*":       {fixed("/nodes/acme-web"), fixed(""), open},

		"GET " + p + "/openapi.json":               {fixed(p + "/openapi.json"), fixed(""), staffRead},
		"GET " + p + "/nodes":                      {fixed(p + "/nodes"), fixed(""), everyoneRead},
		"GET " + p + "/fleet":                      {fixed(p + "/fleet"), fixed(""), everyoneRead},
		"GET " + p + "/nodes/{node}":               {fixed(p + "/nodes/acme-web"), fixed(""), acmeNodeRead},
		"GET " + p + "/nodes/{node}/tree":          {fixed(p + "/nodes/acme-web/tree"), fixed(""), acmeNodeRead},
		"GET " + p + "/nodes/{node}/series":        {fixed(p + "/nodes/acme-web/series?metric=tcp_reset"), fixed(""), acmeNodeRead},
		"GET " + p + "/nodes/{node}/series/batch":  {fixed(p + "/nodes/acme-web/series/batch?metric=tcp_reset&metric=tcp_reset/sent"), fixed(""), acmeNodeRead},
		"GET " + p + "/nodes/{node}/events":        {fixed(p + "/nodes/acme-web/events?metric=tcp_reset"), fixed(""), acmeNodeRead},
		"GET " + p + "/nodes/{node}/thresholds":    {fixed(p + "/nodes/acme-web/thresholds"), fixed(""), acmeNodeRead},
		"POST " + p + "/nodes/{node}/expand":       {fixed(p + "/nodes/acme-web/expand"), fixed(`{"seconds":5}`), operatorWrite(accepted)},
		"GET " + p + "/thresholds":                 {fixed(p + "/thresholds"), fixed(""), everyoneRead},
		"PUT " + p + "/thresholds":                 {fixed(p + "/thresholds"), fixed(`{"scope":{"kind":"global"},"metric":"tcp_reset/sent","threshold":{"warn":7,"crit":70,"comparison":"above","hold_intervals":1}}`), operatorWrite(ok)},
		"DELETE " + p + "/thresholds/{id}":         {fresh(freshOverride, p+"/thresholds/%d"), fixed(""), operatorWrite(gone)},
		"GET " + p + "/alert-rules":                {fixed(p + "/alert-rules"), fixed(""), staffRead},
		"POST " + p + "/alert-rules":               {fixed(p + "/alert-rules"), ruleBody, operatorWrite(created)},
		"GET " + p + "/alert-rules/{id}":           {fixed(p + "/alert-rules/1"), fixed(""), staffRead},
		"PUT " + p + "/alert-rules/{id}":           {fresh(freshRule, p+"/alert-rules/%d"), func(c int) string { return ruleBody(c + 10) }, operatorWrite(ok)},
		"DELETE " + p + "/alert-rules/{id}":        {fresh(freshRule, p+"/alert-rules/%d"), fixed(""), operatorWrite(gone)},
		"GET " + p + "/alerts":                     {fixed(p + "/alerts"), fixed(""), everyoneRead},
		"GET " + p + "/alerts/{id}":                {fixed(fmt.Sprintf("%s/alerts/%d", p, f.acmeAlert)), fixed(""), acmeNodeRead},
		"POST " + p + "/alerts/{id}/acknowledge":   {fixed(fmt.Sprintf("%s/alerts/%d/acknowledge", p, f.acmeAlert)), fixed(`{"comment":"on it"}`), operatorWrite(ok)},
		"DELETE " + p + "/alerts/{id}/acknowledge": {fixed(fmt.Sprintf("%s/alerts/%d/acknowledge", p, f.acmeAlert)), fixed(""), operatorWrite(ok)},
		"POST " + p + "/alerts/{id}/silence":       {fixed(fmt.Sprintf("%s/alerts/%d/silence", p, f.acmeAlert)), fixed(`{"duration_seconds":600}`), operatorWrite(ok)},
		"DELETE " + p + "/alerts/{id}/silence":     {fresh(freshSilenced, p+"/alerts/%d/silence"), fixed(""), operatorWrite(ok)},
		"POST " + p + "/login":                     {fixed(p + "/login"), fixed(`{"token":"` + f.tokens[viewer] + `"}`), open},
		"POST " + p + "/logout":                    {fixed(p + "/logout"), fixed(""), want{gone, gone, gone, gone, gone, gone}},
		"GET " + p + "/whoami":                     {fixed(p + "/whoami"), fixed(""), everyoneRead},
		"GET " + p + "/tokens":                     {fixed(p + "/tokens"), fixed(""), adminOnly(ok)},
		"POST " + p + "/tokens":                    {fixed(p + "/tokens"), func(c int) string { return fmt.Sprintf(`{"name":"made-by-%d","role":"viewer"}`, c) }, adminOnly(created)},
		"DELETE " + p + "/tokens/{id}":             {fresh(freshToken, p+"/tokens/%d"), fixed(""), adminOnly(ok)},
		"GET " + p + "/audit":                      {fixed(p + "/audit"), fixed(""), staffRead},
		"GET " + p + "/reports":                    {fixed(p + "/reports?selector=rack%3Dr1"), fixed(""), everyoneRead},
		"GET " + p + "/report-definitions":         {fixed(p + "/report-definitions"), fixed(""), everyoneRead},
		"POST " + p + "/report-definitions":        {fixed(p + "/report-definitions"), reportBody, operatorWrite(created)},
		"GET " + p + "/report-definitions/{id}":    {fixed(fmt.Sprintf("%s/report-definitions/%d", p, f.acmeReport)), fixed(""), acmeNodeRead},
		"PUT " + p + "/report-definitions/{id}":    {fresh(freshReport, p+"/report-definitions/%d"), reportBody, operatorWrite(ok)},
		"DELETE " + p + "/report-definitions/{id}": {fresh(freshReport, p+"/report-definitions/%d"), fixed(""), operatorWrite(gone)},
		"GET " + p + "/node-identities":            {fixed(p + "/node-identities"), fixed(""), adminOnly(ok)},
		"POST " + p + "/nodes/{node}/revoke":       {func(c int) string { return fmt.Sprintf("%s/nodes/revoked-%d/revoke", p, c) }, fixed(""), adminOnly(ok)},
		"POST " + p + "/nodes/{node}/reenroll":     {revokedNode(f, p+"/nodes/%s/reenroll"), fixed(""), adminOnly(ok)},
		"DELETE " + p + "/nodes/{node}":            {revokedNode(f, p+"/nodes/%s"), fixed(""), adminOnly(gone)},
		"GET " + p + "/node-identities":            {fixed(p + "/node-identities"), fixed(""), adminOnly(ok)},
		"POST " + p + "/nodes/{node}/revoke":       {func(c int) string { return fmt.Sprintf("%s/nodes/revoked-%d/revoke", p, c) }, fixed(""), adminOnly(ok)},
		"POST " + p + "/nodes/{node}/reenroll":     {revokedNode(f, p+"/nodes/%s/reenroll"), fixed(""), adminOnly(ok)},
		"DELETE " + p + "/nodes/{node}":            {enrolledNode(f, p+"/nodes/%s"), fixed(""), adminOnly(gone)},
		"PUT " + p + "/nodes/{node}/labels":        {func(c int) string { return fmt.Sprintf("%s/nodes/labelled-%d/labels", p, c) }, fixed(`{"labels":{"customer":"initech"}}`), adminOnly(ok)},
		"GET " + p + "/node-bootstrap-tokens":      {fixed(p + "/node-bootstrap-tokens"), fixed(""), adminOnly(ok)},
		"POST " + p + "/node-bootstrap-tokens": {fixed(p + "/node-bootstrap-tokens"), func(c int) string {
			return fmt.Sprintf(`{"name":"bt-%d-%d","labels":{"customer":"acme"}}`, c, time.Now().UnixNano())
		}, adminOnly(created)},
		"DELETE " + p + "/node-bootstrap-tokens/{name}": {func(c int) string {
			name := fmt.Sprintf("gone-bt-%d-%d", c, time.Now().UnixNano())
			if _, _, err := f.identities.CreateBootstrapToken(access.WithPrincipal(context.Background(), access.CLIPrincipal()),
				nodeauth.NewBootstrapToken{Name: name, Labels: map[string]string{"customer": "acme"}}); err != nil {
				f.t.Fatalf("create bootstrap token %s: %v", name, err)
			}
			return fmt.Sprintf("%s/node-bootstrap-tokens/%s", p, name)
		}, fixed(""), adminOnly(gone)},
	}
	return calls
}

// staffLeaks lists the keys of a JSON answer, at any depth, that are in
// staff; a "deliveries" list counts only when it is not empty (a customer's
// alert detail has it, empty).
func staffLeaks(body string, staff []string) []string {
	var v any
	if json.Unmarshal([]byte(body), &v) != nil {
		return nil // CSV, or an empty answer
	}
	var out []string
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if slices.Contains(staff, k) {
					if list, ok := e.([]any); !ok || len(list) > 0 {
						out = append(out, at+"."+k)
					}
				}
				walk(e, at+"."+k)
			}
		case []any:
			for i, e := range x {
				walk(e, fmt.Sprintf("%s[%d]", at, i))
			}
		}
	}
	walk(v, "$")
	sort.Strings(out)
	return out
}

// TestCustomersSeeNoStaffFields: the staff fields are in staff's answers
// (so TestAccess, which finds none in a customer's, proves something), and
// not in a customer's answers to the same calls.
func TestCustomersSeeNoStaffFields(t *testing.T) {
	f := newFleet(t, access.Config{})
	p := api.Prefix
	for _, c := range []struct {
		path, field string
	}{
		{p + "/alerts", "evaluator"},
		{p + "/alerts", "holder"},
		{p + "/alerts", "runbook_url"},
		{fmt.Sprintf("%s/alerts/%d", p, f.acmeAlert), "runbook_url"},
		{fmt.Sprintf("%s/alerts/%d", p, f.acmeAlert), "deliveries"},
		{p + "/report-definitions", "created_by"},
		{fmt.Sprintf("%s/report-definitions/%d", p, f.acmeReport), "created_by"},
	} {
		code, _, body := f.do(viewer, "GET", c.path, "")
		if code != 200 || len(staffLeaks(body, []string{c.field})) == 0 {
			t.Errorf("viewer: GET %s: %d, no %s in %.400s", c.path, code, c.field, body)
		}
		code, _, body = f.do(acme, "GET", c.path, "")
		if code != 200 || len(staffLeaks(body, []string{c.field})) != 0 {
			t.Errorf("acme: GET %s: %d, %s in %.400s", c.path, code, c.field, body)
		}
		// What the customer is shown of the same object is still there.
		if !strings.Contains(body, "acme") {
			t.Errorf("acme: GET %s shows nothing of acme's: %.400s", c.path, body)
		}
	}
}

// TestCustomerIsolation: a customer's answers hold its own nodes and
// nothing of another tenant's — in lists, counts, alerts, overrides and
// evidence — and what is outside its scope is not found exactly like what
// does not exist.
func TestCustomerIsolation(t *testing.T) {
	f := newFleet(t, access.Config{})
	p := api.Prefix
	reads := []string{
		p + "/nodes", p + "/fleet", p + "/fleet?sort=name&limit=500", p + "/thresholds", p + "/alerts", p + "/alerts?state=all&limit=1000", p + "/alerts?state=firing",
		p + "/whoami",
		p + "/reports", p + "/reports?format=csv", p + "/reports?selector=rack%3Dr1&from=" + strconv.FormatInt(time.Now().Add(-24*time.Hour).UnixMilli(), 10), p + "/report-definitions",
	}
	own := map[int]string{acme: "acme-web", globex: "globex-db"}
	other := map[int]string{acme: "globex", globex: "acme"}
	rival := map[int]int{acme: globex, globex: acme}
	for _, caller := range []int{acme, globex} {
		node := own[caller]
		mine := append(slices.Clone(reads),
			p+"/nodes/"+node, p+"/nodes/"+node+"/tree", p+"/nodes/"+node+"/tree?window=1h",
			p+"/nodes/"+node+"/series?metric=tcp_reset", p+"/nodes/"+node+"/series?metric=tcp_reset/sent&step=1m",
			p+"/nodes/"+node+"/series/batch?metric=tcp_reset&metric=tcp_reset/sent", p+"/nodes/"+node+"/tree?at="+strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10),
			p+"/nodes/"+node+"/events?metric=tcp_reset", p+"/nodes/"+node+"/thresholds",
			p+"/alerts?node="+own[rival[caller]], // filtering by another tenant's node finds nothing
		)
		for _, path := range mine {
			code, _, body := f.do(caller, "GET", path, "")
			if code != 200 {
				t.Errorf("%s: GET %s: HTTP %d %.300s", callerNames[caller], path, code, body)
			}
			if strings.Contains(body, other[caller]) {
				t.Errorf("%s: GET %s reveals %q: %s", callerNames[caller], path, other[caller], body)
			}
		}
	}

	// The two nodes' evidence is about one flow: staff see each side's
	// counterpart on the other, which is what makes the check above (a
	// customer's evidence never names the rival) mean something.
	for node, peer := range map[string]string{"acme-web": "globex-db", "globex-db": "acme-web"} {
		_, _, body := f.do(viewer, "GET", p+"/nodes/"+node+"/events?metric=tcp_reset", "")
		if !strings.Contains(body, `"node": "`+peer+`"`) {
			t.Errorf("viewer: events of %s have no counterpart on %s: %s", node, peer, body)
		}
	}

	// Counts: the fleet, the alerts and the overrides hold exactly the
	// caller's own.
	names := func(caller int, path, list, field string) []string {
		t.Helper()
		_, _, body := f.do(caller, "GET", api.Prefix+path, "")
		var v map[string]json.RawMessage
		var items []map[string]any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
		if err := json.Unmarshal(v[list], &items); err != nil {
			t.Fatalf("GET %s: %s: %v in %s", path, list, err, body)
		}
		var out []string
		for _, item := range items {
			out = append(out, fmt.Sprint(item[field]))
		}
		sort.Strings(out)
		return out
	}
	ids := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, fmt.Sprint(f.overrides[n]))
		}
		sort.Strings(out)
		return out
	}
	for _, c := range []struct {
		caller            int
		nodes, alerts, ov []string
	}{
		{acme, []string{"acme-web"}, []string{fmt.Sprint(f.acmeAlert)}, ids("global", "acme", "acme-node", "shared-rack")},
		{globex, []string{"globex-db"}, []string{fmt.Sprint(f.globexAlert)}, ids("global", "globex", "globex-node", "shared-rack")},
		{viewer, []string{"acme-web", "globex-db"}, []string{fmt.Sprint(f.acmeAlert), fmt.Sprint(f.globexAlert), fmt.Sprint(f.groupAlert)},
			ids("global", "acme", "globex", "acme-node", "globex-node", "shared-rack", "no-such-node", "other-tenants")},
	} {
		if got := names(c.caller, "/nodes", "nodes", "name"); !slices.Equal(got, c.nodes) {
			t.Errorf("%s: GET /nodes lists %v, want %v", callerNames[c.caller], got, c.nodes)
		}
		if got := names(c.caller, "/fleet", "nodes", "name"); !slices.Equal(got, c.nodes) {
			t.Errorf("%s: GET /fleet lists %v, want %v", callerNames[c.caller], got, c.nodes)
		}
		var fl api.Fleet
		if _, _, body := f.do(c.caller, "GET", p+"/fleet", ""); json.Unmarshal([]byte(body), &fl) != nil {
			t.Fatalf("GET /fleet: %s", body)
		}
		if n := fl.Counts.OK + fl.Counts.Warn + fl.Counts.Crit + fl.Counts.Unknown; fl.Total != len(c.nodes) || n != len(c.nodes) {
			t.Errorf("%s: GET /fleet counts %+v of %d nodes, want %d", callerNames[c.caller], fl.Counts, fl.Total, len(c.nodes))
		}
		alerts := names(c.caller, "/alerts", "alerts", "id")
		for i := range alerts {
			alerts[i] = strings.TrimSuffix(alerts[i], ".0") // JSON numbers decode as float64
		}
		sort.Strings(c.alerts)
		if !slices.Equal(alerts, c.alerts) {
			t.Errorf("%s: GET /alerts lists %v, want %v", callerNames[c.caller], alerts, c.alerts)
		}
		ov := names(c.caller, "/thresholds", "overrides", "id")
		for i := range ov {
			ov[i] = strings.TrimSuffix(ov[i], ".0")
		}
		if !slices.Equal(ov, c.ov) {
			t.Errorf("%s: GET /thresholds lists overrides %v, want %v", callerNames[c.caller], ov, c.ov)
		}
	}

	// The delivery log (receiver URLs) is staff's.
	for caller, want := range map[int]bool{acme: false, viewer: true} {
		_, _, body := f.do(caller, "GET", fmt.Sprintf("%s/alerts/%d", p, f.acmeAlert), "")
		if got := strings.Contains(body, "hooks.internal"); got != want {
			t.Errorf("%s: alert detail shows the delivery log: %v, want %v: %s", callerNames[caller], got, want, body)
		}
	}

	// Outside the scope is exactly like not there: same status, same
	// message but for the name asked.
	outside := []struct{ hidden, missing string }{
		{p + "/nodes/globex-db", p + "/nodes/nosuch-db"},
		{p + "/nodes/globex-db/tree", p + "/nodes/nosuch-db/tree"},
		{p + "/nodes/globex-db/series?metric=tcp_reset", p + "/nodes/nosuch-db/series?metric=tcp_reset"},
		{p + "/nodes/globex-db/series/batch?metric=tcp_reset", p + "/nodes/nosuch-db/series/batch?metric=tcp_reset"},
		{p + "/nodes/globex-db/tree?at=1000", p + "/nodes/nosuch-db/tree?at=1000"},
		{p + "/nodes/globex-db/events?metric=tcp_reset", p + "/nodes/nosuch-db/events?metric=tcp_reset"},
		{p + "/nodes/globex-db/thresholds", p + "/nodes/nosuch-db/thresholds"},
		{fmt.Sprintf("%s/alerts/%d", p, f.globexAlert), p + "/alerts/987654321"},
		{fmt.Sprintf("%s/alerts/%d", p, f.groupAlert), p + "/alerts/987654321"},
		{p + "/alert-rules", p + "/no-such-route"},
		{p + "/audit", p + "/no-such-route"},
	}
	number := regexp.MustCompile(`globex-db|nosuch-db|alerts/[0-9]+|alert [0-9]+|/api/v1/[a-z-]+`)
	for _, o := range outside {
		hc, _, hb := f.do(acme, "GET", o.hidden, "")
		mc, _, mb := f.do(acme, "GET", o.missing, "")
		if hc != 404 || mc != 404 || number.ReplaceAllString(hb, "X") != number.ReplaceAllString(mb, "X") {
			t.Errorf("acme: GET %s: %d %s\nbut GET %s: %d %s\nwant the same 404", o.hidden, hc, hb, o.missing, mc, mb)
		}
	}
	// A method a customer may not use on a path it may not see: as unknown
	// as the path, not a 405 that tells it the route exists.
	if code, h, body := f.do(acme, "PATCH", p+"/alert-rules/1", ""); code != 404 || h.Get("Allow") != "" {
		t.Errorf("acme: PATCH /alert-rules/1: %d Allow %q %s, want 404", code, h.Get("Allow"), body)
	}
	if code, h, _ := f.do(viewer, "PATCH", p+"/alert-rules/1", ""); code != 405 || h.Get("Allow") != "GET, PUT, DELETE" {
		t.Errorf("viewer: PATCH /alert-rules/1: %d Allow %q, want 405 GET, PUT, DELETE", code, h.Get("Allow"))
	}
}

// TestBrowserProtections: what a page on another site, or a DNS-rebound
// name, can make a signed-in browser do — nothing.
func TestBrowserProtections(t *testing.T) {
	// 127.0.0.1 is where the test's own requests go.
	f := newFleet(t, access.Config{AllowedHosts: access.StringList{"nbs.example.com", "127.0.0.1"}})
	p := api.Prefix
	host := func(h string) []string { return []string{"Host", h} }
	rule := `{"name":"Csrf","state":"crit","for_intervals":1,"severity":"critical"}`
	cases := []struct {
		name           string
		method, path   string
		body           string
		header         []string
		status         int
		want           string
		contentTypeOff bool // send the body without application/json
	}{
		{"a cross-site form posting text/plain", "POST", p + "/alert-rules", rule,
			[]string{"Host", "nbs.example.com", "Content-Type", "text/plain", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, "cross-origin", true},
		{"a cross-origin JSON post (old browser: Origin only)", "POST", p + "/alert-rules", rule,
			[]string{"Host", "nbs.example.com", "Origin", "https://evil.example"}, 403, "cross-origin", false},
		{"a cross-site delete", "DELETE", p + "/alert-rules/1", "",
			[]string{"Host", "nbs.example.com", "Sec-Fetch-Site", "cross-site"}, 403, "cross-origin", false},
		{"a same-origin text/plain post", "POST", p + "/alert-rules", rule,
			[]string{"Host", "nbs.example.com", "Content-Type", "text/plain", "Sec-Fetch-Site", "same-origin"}, 415, "application/json", true},
		{"a form-encoded login", "POST", p + "/login", "token=x",
			[]string{"Host", "nbs.example.com", "Content-Type", "application/x-www-form-urlencoded"}, 415, "application/json", true},
		{"a rebound Host", "GET", p + "/nodes", "", host("evil.example"), 403, "not one this NBS answers to", false},
		{"a rebound Host on the UI", "GET", "/", "", host("evil.example:7700"), 403, "not one this NBS answers to", false},
		{"health by address", "GET", "/healthz", "", host("10.1.2.3:7700"), 200, "ok", false},
		{"readiness by address", "GET", "/readyz", "", host("10.1.2.3:7700"), 200, "ready", false},
		{"metrics by address", "GET", "/metrics", "", host("10.1.2.3:7700"), 200, "nbs_collector", false},
		{"the allowed Host", "GET", p + "/nodes", "", host("nbs.example.com"), 200, "acme-web", false},
		{"a same-origin JSON post", "POST", p + "/alert-rules", rule,
			[]string{"Host", "nbs.example.com", "Origin", "http://nbs.example.com", "Sec-Fetch-Site", "same-origin"}, 201, `"Csrf"`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			hdr := c.header
			if !c.contentTypeOff && body != "" {
				hdr = append(slices.Clone(hdr), "Content-Type", "application/json")
			}
			code, h, out := f.doRaw(operator, c.method, c.path, body, hdr...)
			if code != c.status || !strings.Contains(out, c.want) {
				t.Fatalf("HTTP %d %.300s; want %d with %q", code, out, c.status, c.want)
			}
			for hdr, want := range map[string]string{
				"X-Frame-Options":         "DENY",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"Content-Security-Policy": "frame-ancestors 'none'",
			} {
				if !strings.Contains(h.Get(hdr), want) {
					t.Errorf("%s: %q, want %q", hdr, h.Get(hdr), want)
				}
			}
		})
	}
	// Nothing refused was done.
	var n int
	if err := f.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM alert_rules WHERE name = 'Csrf'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rules named Csrf (%v), want the one same-origin post", n, err)
	}
}

// doRaw is do without the Content-Type do adds to a body.
func (f *fleet) doRaw(caller int, method, path, body string, header ...string) (int, http.Header, string) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.tokens[caller])
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAuditTrail: every change made through the API is in the audit log,
// readable by staff, with who made it and the value before and after.
func TestAuditTrail(t *testing.T) {
	f := newFleet(t, access.Config{})
	p := api.Prefix
	id := f.overrides["acme"]
	if code, _, body := f.do(operator, "PUT", p+"/thresholds", `{"scope":{"kind":"selector","selector":{"customer":"acme"}},"metric":"tcp_reset","threshold":{"warn":8,"crit":80,"comparison":"above","hold_intervals":1}}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	rule := f.create("POST", "/alert-rules", `{"name":"Audited","state":"crit","for_intervals":1,"severity":"critical"}`, 201)
	if code, _, body := f.do(operator, "DELETE", fmt.Sprintf("%s/alert-rules/%d", p, rule), ""); code != 204 {
		t.Fatalf("DELETE rule: %d %s", code, body)
	}
	if code, _, body := f.do(operator, "POST", p+"/nodes/acme-web/expand", `{"seconds":30}`); code != 202 {
		t.Fatalf("expand: %d %s", code, body)
	}
	tok := f.create("POST", "/tokens", `{"name":"audited-token","role":"viewer"}`, 201)
	if code, _, body := f.do(admin, "DELETE", fmt.Sprintf("%s/tokens/%d", p, tok), ""); code != 200 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if code, _, body := f.do(admin, "POST", p+"/nodes/audited-node/revoke", ""); code != 200 {
		t.Fatalf("revoke node: %d %s", code, body)
	}

	code, _, body := f.do(viewer, "GET", p+"/audit?limit=1000", "")
	if code != 200 {
		t.Fatalf("GET audit: %d %s", code, body)
	}
	var log struct {
		Entries []access.AuditRecord `json:"entries"`
	}
	if err := json.Unmarshal([]byte(body), &log); err != nil {
		t.Fatal(err)
	}
	find := func(action, kind, objectID string) *access.AuditRecord {
		for i := range log.Entries {
			if e := &log.Entries[i]; e.Action == action && e.ObjectKind == kind && e.ObjectID == objectID {
				return e
			}
		}
		t.Errorf("no audit entry %s %s %s in %s", action, kind, objectID, body)
		return nil
	}
	// field reads one field of an entry's old or new value; "" is none.
	field := func(raw json.RawMessage, path ...string) string {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil || v == nil {
			return ""
		}
		for _, k := range path {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		if v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	if e := find("update", "threshold", fmt.Sprint(id)); e != nil {
		if e.Actor != "olga" || e.Role != "operator" || e.ActorKind != "token" || field(e.Old, "threshold", "warn") != "3" || field(e.New, "threshold", "warn") != "8" {
			t.Errorf("threshold update entry %+v (old %s, new %s): want olga, operator, by token, warn 3 → 8", e, e.Old, e.New)
		}
	}
	if e := find("create", "threshold", fmt.Sprint(id)); e != nil && (e.Actor != "ada" || field(e.Old) != "" || field(e.New, "threshold", "warn") != "3") {
		t.Errorf("threshold create entry %+v (old %s, new %s): want ada, no old value, warn 3", e, e.Old, e.New)
	}
	if e := find("create", "alert_rule", fmt.Sprint(rule)); e != nil && field(e.New, "name") != "Audited" {
		t.Errorf("rule create entry new %s", e.New)
	}
	if e := find("delete", "alert_rule", fmt.Sprint(rule)); e != nil && (e.Actor != "olga" || field(e.Old, "name") != "Audited" || field(e.New) != "") {
		t.Errorf("rule delete entry %+v old %s new %s", e, e.Old, e.New)
	}
	if e := find("expand", "node", "acme-web"); e != nil && field(e.New, "seconds") != "30" {
		t.Errorf("expand entry new %s", e.New)
	}
	find("create", "token", fmt.Sprint(tok))
	find("revoke", "token", fmt.Sprint(tok))
	if e := find("revoke", "node", "audited-node"); e != nil && e.Role != "admin" {
		t.Errorf("node revoke entry %+v: want it made by the admin", e)
	}
}

// TestClientAddress: the audit log's address, and what the failed sign-in
// limit counts by, is the TCP peer unless the peer is a trusted proxy; an
// X-Forwarded-For any client can send changes neither.
func TestClientAddress(t *testing.T) {
	p := api.Prefix
	change := func(f *fleet, xff string) {
		t.Helper()
		if code, _, body := f.do(operator, "PUT", p+"/thresholds", `{"scope":{"kind":"global"},"metric":"tcp_reset","threshold":{"warn":9,"crit":90,"comparison":"above","hold_intervals":1}}`,
			"X-Forwarded-For", xff); code != 200 {
			t.Fatalf("PUT: %d %s", code, body)
		}
	}
	newest := func(f *fleet) string {
		t.Helper()
		_, _, body := f.do(viewer, "GET", p+"/audit?object_kind=threshold&limit=1", "")
		var log struct {
			Entries []access.AuditRecord `json:"entries"`
		}
		if err := json.Unmarshal([]byte(body), &log); err != nil || len(log.Entries) != 1 {
			t.Fatalf("audit: %v %s", err, body)
		}
		return log.Entries[0].RemoteAddr
	}
	// The test's client connects from 127.0.0.1.
	untrusting := newFleet(t, access.Config{})
	change(untrusting, "203.0.113.9")
	if got := newest(untrusting); got != "127.0.0.1" {
		t.Errorf("a client's own X-Forwarded-For: audit address %q, want the peer 127.0.0.1", got)
	}
	trusting := newFleet(t, access.Config{TrustedProxies: access.PrefixList{netip.MustParsePrefix("127.0.0.1/32")}, FailedAttemptsPerMinute: 2})
	change(trusting, "198.51.100.1, 203.0.113.9")
	if got := newest(trusting); got != "203.0.113.9" {
		t.Errorf("through a trusted proxy: audit address %q, want the client it names, 203.0.113.9", got)
	}

	// Two failed logins of one client behind the proxy use up its
	// allowance; another client behind the same proxy is not held back.
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	bad := `{"token":"nbs_` + strings.Repeat("b", 52) + `"}`
	for i, want := range []int{401, 401, 429} {
		code, h, body := trusting.do(none, "POST", p+"/login", bad, "X-Forwarded-For", "203.0.113.9")
		if code != want {
			t.Fatalf("login %d: %d %s, want %d", i+1, code, body, want)
		}
		if err := doc.CheckResponse("POST", "/login", code, []byte(body)); err != nil {
			t.Error(err)
		}
		// Half a minute refills one of two a minute, less what the test took.
		if n, err := strconv.Atoi(h.Get("Retry-After")); code == 429 && (err != nil || n < 20 || n > 30 || !strings.Contains(body, `"too_many_requests"`)) {
			t.Errorf("429 without a Retry-After of about 30 s or its code: %v %s", h, body)
		}
	}
	if code, _, body := trusting.do(none, "POST", p+"/login", `{"token":"`+trusting.tokens[viewer]+`"}`, "X-Forwarded-For", "203.0.113.10"); code != 200 {
		t.Errorf("another client behind the proxy: %d %s", code, body)
	}
}

// TestStringParameters: every parameter of every route the collector
// serves, as openapi.json documents it, and one no route documents, is
// refused with a 400 naming it when it holds a NUL byte, invalid UTF-8, a
// control character or more than api.MaxParamBytes — before any handler
// runs (nothing reaches PostgreSQL, nothing is a 500) — as each caller the
// access test's table lets call the route. The routes come from the router
// and the parameters from the document, so a new one is covered at once.
func TestStringParameters(t *testing.T) {
	f := newFleet(t, access.Config{})
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	calls := accessCalls(f)
	bad := []struct{ what, value string }{
		{"a NUL byte", "a\x00b"},
		{"invalid UTF-8", "\xff\xfe"},
		{"a newline", "a\nb"},
		{"an oversized value", strings.Repeat("a", api.MaxParamBytes+1)},
	}
	sent := 0
	for _, route := range f.routes() {
		method, pattern, _ := strings.Cut(route, " ")
		rel, ok := strings.CutPrefix(pattern, api.Prefix)
		c, known := calls[route]
		if !ok || !known {
			continue // not the API's, or TestAccess fails for want of an entry
		}
		params := append(doc.Parameters(method+" "+rel), apitest.Param{Name: "undocumented", In: "query"})
		for _, p := range params {
			for _, b := range bad {
				for _, caller := range []int{admin, acme} {
					if c.want[caller] >= 400 {
						continue // Require answers first: the route is not the caller's
					}
					path := withParam(t, pattern, c.path(caller), p, b.value)
					code, _, body := f.do(caller, method, path, c.body(caller))
					sent++
					if code != 400 || !strings.Contains(body, "parameter "+p.Name) || !strings.Contains(body, `"bad_request"`) {
						t.Errorf("%s as %s, %s %s holding %s: HTTP %d %.300s; want a 400 naming it", route, callerNames[caller], p.In, p.Name, b.what, code, body)
					}
				}
			}
		}
	}
	if sent < 200 {
		t.Fatalf("only %d requests sent: the routes or their parameters were not found", sent)
	}
}

// withParam is path (a call of pattern) with parameter p set to v.
func withParam(t *testing.T, pattern, path string, p apitest.Param, v string) string {
	t.Helper()
	base, rawQuery, _ := strings.Cut(path, "?")
	if p.In == "query" {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		q.Set(p.Name, v)
		return base + "?" + q.Encode()
	}
	segs, pats := strings.Split(base, "/"), strings.Split(pattern, "/")
	i := slices.Index(pats, "{"+p.Name+"}")
	if i < 0 || len(segs) != len(pats) {
		t.Fatalf("%s has no {%s} where %s has it", path, p.Name, pattern)
	}
	segs[i] = url.PathEscape(v)
	out := strings.Join(segs, "/")
	if rawQuery != "" {
		out += "?" + rawQuery
	}
	return out
}

// TestBodiesHoldNoNUL: a NUL byte (\u0000) in any string of any route's
// JSON body, one string at a time, is a 400 naming where it is — never a
// 500 from PostgreSQL, which stores it in neither text nor jsonb. The
// bodies are the access test's, so a new route's is covered at once.
func TestBodiesHoldNoNUL(t *testing.T) {
	f := newFleet(t, access.Config{})
	calls := accessCalls(f)
	sent := 0
	for _, route := range f.routes() {
		method, _, _ := strings.Cut(route, " ")
		c, ok := calls[route]
		if !ok || c.want[admin] >= 400 || c.body(admin) == "" {
			continue
		}
		var doc any
		if err := json.Unmarshal([]byte(c.body(admin)), &doc); err != nil {
			t.Fatalf("%s: its body is not JSON: %v", route, err)
		}
		for i := 0; ; i++ {
			bad, at, ok := withNUL(doc, i)
			if !ok {
				break
			}
			b, err := json.Marshal(bad)
			if err != nil {
				t.Fatal(err)
			}
			code, _, body := f.do(admin, method, c.path(admin), string(b))
			sent++
			// A login's token that does not work is a failed sign-in,
			// whatever it holds (collector/access: 401, counted).
			want := 400
			if route == "POST "+api.Prefix+"/login" {
				want = 401
			}
			// Where it is, or the NUL itself in what the handler quotes
			// (a time or a name it could not take).
			named := strings.Contains(body, "holds a NUL byte") && strings.Contains(body, at) ||
				strings.Contains(body, `\\u0000`) || strings.Contains(body, `\\x00`)
			if code != want || (want == 400 && !named) {
				t.Errorf("%s with a NUL in %s: HTTP %d %.300s; want %d naming it", route, at, code, body, want)
			}
		}
	}
	if sent < 15 {
		t.Fatalf("only %d bodies sent", sent)
	}
}

// withNUL is a copy of v whose n-th string (in a walk of sorted keys) has a
// NUL byte appended, and where that string is; ok is false past the last.
func withNUL(v any, n int) (any, string, bool) {
	i := 0
	var at string
	var walk func(v any, path string) any
	walk = func(v any, path string) any {
		switch x := v.(type) {
		case string:
			if i++; i-1 == n {
				at = path
				return x + "\x00"
			}
			return x
		case []any:
			out := make([]any, len(x))
			for j, e := range x {
				out[j] = walk(e, fmt.Sprintf("%s[%d]", path, j))
			}
			return out
		case map[string]any:
			out := make(map[string]any, len(x))
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				p := k
				if path != "" {
					p = path + "." + k
				}
				out[k] = walk(x[k], p)
			}
			return out
		}
		return v
	}
	out := walk(v, "")
	return out, at, at != ""
}
