package nodeconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/api/apitest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestHTTP drives the thresholds and expand routes through the API's route
// table and holds every answer to openapi.json.
func TestHTTP(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	var err error
	n := store.Node{Name: "web-1", Labels: map[string]string{"customer": "acme"}, InstanceID: 1, IntervalMS: 1000}
	if n.ID, err = st.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	thr := &store.Threshold{Warn: 1, Crit: 10, Comparison: "above", HoldIntervals: 1}
	ids, err := st.UpsertDefinitions(ctx, n.ID, []store.MetricDef{
		{Path: "tcp_reset", Kind: store.KindRate, DefaultThreshold: thr},
		{Path: "tcp_reset/sent", Kind: store.KindRate},
		{Path: "agent/triggered/latency_rx", Kind: store.KindGauge},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The agent attached its receive latency programs, then detached them
	// over the budget: the newest event is what the expand answers with.
	now := time.Now()
	if _, err := st.WriteReports(ctx, []store.Report{{NodeID: n.ID, InstanceID: 1, Seq: 1, Time: now, IntervalMS: 1000,
		Events: []store.Event{
			{MetricID: ids["agent/triggered/latency_rx"], Time: now.Add(-20 * time.Second),
				Fields: map[string]string{"action": "attached", "reason": "always on"}},
			{MetricID: ids["agent/triggered/latency_rx"], Time: now.Add(-10 * time.Second),
				Fields: map[string]string{"action": "detached", "reason": "over budget, 3.2% of a CPU vs 1% (this source 3.1%)"}},
		}}}); err != nil {
		t.Fatal(err)
	}
	svc := New(st, slog.New(slog.DiscardHandler))
	push := &fakePusher{}
	svc.SetPusher(push)
	r := chi.NewRouter()
	acc, err := access.New(nil, access.Config{Mode: access.ModeNone}, nil) // everyone is admin
	if err != nil {
		t.Fatal(err)
	}
	r.Mount(api.Prefix, api.V1(api.Routes(api.Parts{NodeConfig: svc}), acc))
	srv := httptest.NewServer(r)
	defer srv.Close()

	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	patterns := []struct {
		re      *regexp.Regexp
		pattern string
	}{
		{regexp.MustCompile(`^/thresholds/[^/]+$`), "/thresholds/{id}"},
		{regexp.MustCompile(`^/nodes/[^/]+/`), "/nodes/{node}/"},
	}
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+api.Prefix+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		pattern := path
		for _, p := range patterns {
			pattern = p.re.ReplaceAllString(pattern, p.pattern)
		}
		if err := doc.CheckResponse(method, pattern, resp.StatusCode, b); err != nil {
			t.Error(err)
		}
		return resp.StatusCode, string(b)
	}

	bad := []struct{ body, want string }{
		// Every problem at once, under the override's own error.
		{`{"scope":{"kind":"planet"},"metric":"TCP","threshold":{"warn":5,"crit":1,"comparison":"above"}}`,
			`invalid override: scope.kind \"planet\" must be global, selector or node; metric \"TCP\" is not a metric id like tcp_reset/sent/no_socket: 'T' is not allowed in segment \"TCP\" (the root segment takes a-z, 0-9 and '_'); threshold: warn (5) must not be above crit (1)`},
		{`{"scope":{"kind":"global"},"metric":"tcp_reset","bogus":1}`, `unknown field \"bogus\"`},
		{`{"scope":{"kind":"global"},"metric":"tcp_reset","disabled":true} {}`, "more than one JSON value"},
		{``, "request body is empty"},
	}
	for _, b := range bad {
		if code, body := do("PUT", "/thresholds", b.body); code != 400 || !strings.Contains(body, b.want) || !strings.Contains(body, `"bad_request"`) {
			t.Errorf("PUT %s: %d %s; want 400 mentioning %q", b.body, code, body, b.want)
		}
	}
	if code, body := do("PUT", "/thresholds", `{"metric":"`+strings.Repeat("x", 2<<20)+`"}`); code != 413 || !strings.Contains(body, `"too_large"`) {
		t.Errorf("PUT of 2 MiB: %d %.200s, want 413", code, body)
	}

	code, body := do("PUT", "/thresholds", `{"scope":{"kind":"selector","selector":{"customer":"acme"}},"metric":"tcp_reset","threshold":{"warn":2,"crit":3,"comparison":"above","hold_intervals":1}}`)
	if code != 200 {
		t.Fatalf("PUT override: %d %s", code, body)
	}
	var o Override
	if err := json.Unmarshal([]byte(body), &o); err != nil || o.ID == 0 {
		t.Fatalf("PUT override answered %s (%v)", body, err)
	}
	if push.count() == 0 {
		t.Error("a new override was not pushed to the agents")
	}
	// A second put of the same scope and metric replaces it.
	code, body = do("PUT", "/thresholds", `{"scope":{"kind":"selector","selector":{"customer":"acme"}},"metric":"tcp_reset","threshold":{"warn":4,"crit":5,"comparison":"above","hold_intervals":1}}`)
	if code != 200 || !strings.Contains(body, fmt.Sprintf(`"id": %d`, o.ID)) {
		t.Fatalf("second PUT of the override: %d %s, want id %d again", code, body, o.ID)
	}
	if code, body := do("GET", "/thresholds", ""); code != 200 || !strings.Contains(body, `"customer": "acme"`) {
		t.Errorf("GET thresholds: %d %s", code, body)
	}
	if code, body := do("GET", "/nodes/web-1/thresholds", ""); code != 200 || !strings.Contains(body, `"source": "selector:customer=acme"`) || !strings.Contains(body, `"source": "default"`) {
		t.Errorf("GET effective: %d %s", code, body)
	}
	if code, body := do("GET", "/nodes/nope/thresholds", ""); code != 404 || !strings.Contains(body, `node \"nope\": not found`) {
		t.Errorf("GET effective of an unknown node: %d %s", code, body)
	}
	if code, body := do("GET", "/nodes/-x/thresholds", ""); code != 400 || !strings.Contains(body, "is not a node name") {
		t.Errorf("GET effective of a bad node name: %d %s", code, body)
	}

	if code, body := do("POST", "/nodes/web-1/expand", `{"seconds":60}`); code != 202 || !strings.Contains(body, `"until"`) ||
		!strings.Contains(body, `"note": "detached: over budget, 3.2% of a CPU vs 1% (this source 3.1%)"`) ||
		!strings.Contains(body, `"attached": false`) || !strings.Contains(body, `"metric": "agent/triggered/latency_rx"`) {
		t.Errorf("expand: %d %s; want the receive latency's detach over budget", code, body)
	}
	if cfg, err := svc.ConfigFor(ctx, n); err != nil || cfg.GetExpandUntilUnixNano() == 0 || cfg.GetExpandBudgetPercent() != 0 {
		t.Errorf("config after an expand without a budget: %v, %v", cfg, err)
	}
	// An expand may raise the budget for its duration, up to 25%.
	if code, body := do("POST", "/nodes/web-1/expand", `{"seconds":60,"budget_percent":5}`); code != 202 || !strings.Contains(body, `"budget_percent": 5`) {
		t.Errorf("expand with a budget: %d %s", code, body)
	}
	if cfg, err := svc.ConfigFor(ctx, n); err != nil || cfg.GetExpandBudgetPercent() != 5 {
		t.Errorf("config after an expand with a 5%% budget: %v, %v", cfg, err)
	}
	for _, b := range []string{"25.5", "-1", "1e9"} {
		if code, body := do("POST", "/nodes/web-1/expand", `{"seconds":60,"budget_percent":`+b+`}`); code != 400 || !strings.Contains(body, "must be from 0") {
			t.Errorf("expand with budget %s: %d %s, want 400", b, code, body)
		}
	}
	for _, s := range []string{"0", "3601", "9223372036854775807", "-9223372036854775808"} {
		if code, body := do("POST", "/nodes/web-1/expand", `{"seconds":`+s+`}`); code != 400 || !strings.Contains(body, "must be from 1 to 3600") {
			t.Errorf("expand for %s seconds: %d %s, want 400", s, code, body)
		}
	}
	if code, _ := do("POST", "/nodes/nope/expand", `{"seconds":60}`); code != 404 {
		t.Errorf("expand of an unknown node: %d, want 404", code)
	}

	if code, body := do("DELETE", "/thresholds/abc", ""); code != 400 || !strings.Contains(body, `override id \"abc\" is not a number`) {
		t.Errorf("DELETE abc: %d %s", code, body)
	}
	if code, body := do("DELETE", fmt.Sprintf("/thresholds/%d", o.ID), ""); code != 204 || body != "" {
		t.Errorf("DELETE: %d %q, want 204", code, body)
	}
	if code, body := do("DELETE", fmt.Sprintf("/thresholds/%d", o.ID), ""); code != 404 || !strings.Contains(body, "not found") {
		t.Errorf("second DELETE: %d %s, want 404", code, body)
	}

	// Every change is in the audit log with the value before and after;
	// the refused ones are not.
	rows, err := st.Pool().Query(ctx, `SELECT action, object_kind, object_id, coalesce(old_value->'threshold'->>'warn', '-'),
		coalesce(new_value->'threshold'->>'warn', '-'), actor_kind FROM audit_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var a, k, id, old, cur, via string
		err := r.Scan(&a, &k, &id, &old, &cur, &via)
		return strings.Join([]string{a, k, id, old, cur, via}, " "), err
	})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(o.ID)
	want := []string{"create threshold " + id + " - 2 none", "update threshold " + id + " 2 4 none",
		"expand node web-1 - - none", "expand node web-1 - - none", "delete threshold " + id + " 4 - none"}
	if !slices.Equal(got, want) {
		t.Errorf("audit log:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	// The expands' budgets are audited with them.
	rows, err = st.Pool().Query(ctx, `SELECT new_value->>'budget_percent' FROM audit_log WHERE action = 'expand' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	budgets, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(budgets, []string{"0", "5"}) {
		t.Errorf("audited expand budgets %q (%v), want 0 and 5", budgets, err)
	}
}
