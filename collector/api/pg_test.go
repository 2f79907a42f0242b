package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// The tests of this file read a real store; the others run without one.
func TestMain(m *testing.M) { pgcluster.Main(m) }

// pgNode is a node with a rate branch (tcp_reset, raised for five minutes
// 40 minutes ago and quiet since), a latency histogram that had samples
// only in that incident, and the agent's own root, written as an agent
// reports: a report every 10 s for the last hour.
func pgNode(t *testing.T, now time.Time) (*store.Store, time.Time, time.Time) {
	t.Helper()
	ctx := context.Background()
	st := storetest.Open(t)
	id, err := st.UpsertNode(ctx, store.Node{Name: "web-1", IntervalMS: 10000, Labels: map[string]string{"customer": "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	thr := &store.Threshold{Warn: 1, Crit: 5, Comparison: "above", HoldIntervals: 1}
	defs := []store.MetricDef{
		{Path: "agent", Title: "Agent overhead", Unit: "% of a CPU", Kind: store.KindGauge, Description: "Costs CPU. Detached over --overhead.budget."},
		{Path: "latency", Title: "Latency", Unit: "ms", Kind: store.KindHistogram, Scale: 1000, Quantile: 0.99},
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
		{Path: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: store.KindRate},
		{Path: "tcp_reset/sent/pod:shop.cart-1", Title: "Sent in pod shop/cart-1", Unit: "resets/s", Kind: store.KindRate},
		{Path: "tcp_reset/sent/process:sleep.42", Title: "Sent by sleep", Unit: "resets/s", Kind: store.KindRate},
	}
	ids, err := st.UpsertDefinitions(ctx, id, defs)
	if err != nil {
		t.Fatal(err)
	}
	incFrom, incTo := now.Add(-40*time.Minute).Truncate(time.Minute), now.Add(-35*time.Minute).Truncate(time.Minute)
	var reports []store.Report
	start := now.Add(-time.Hour).Truncate(time.Minute)
	for i, ts := 0, start; ts.Before(now); i, ts = i+1, ts.Add(10*time.Second) {
		r := store.Report{NodeID: id, InstanceID: 1, Seq: uint64(i + 1), Time: ts, IntervalMS: 10000,
			Samples: []store.Sample{
				{MetricID: ids["agent"], Path: "agent", Value: 0.5, State: store.StateOK},
				{MetricID: ids["latency"], Path: "latency", Value: 0, State: store.StateOK, NoValue: true},
				{MetricID: ids["tcp_reset"], Path: "tcp_reset", Value: 0, State: store.StateOK},
			}}
		if !ts.Before(incFrom) && ts.Before(incTo) {
			r.Samples[1] = store.Sample{MetricID: ids["latency"], Path: "latency", Value: 2, State: store.StateOK}
			r.Histograms = []store.Histogram{{MetricID: ids["latency"], Path: "latency", Count: 4, Sum: 8000, BucketIndex: []int32{100}, BucketCount: []int64{4}}}
			r.Samples[2] = store.Sample{MetricID: ids["tcp_reset"], Path: "tcp_reset", Value: 100, State: store.StateCrit}
			// Evidence is recorded on the parent, naming the owner.
			ev := func(ownerID, kind string) store.Event {
				return store.Event{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Time: ts, Fields: map[string]string{
					"src": "10.0.0.1:9", "dst": "10.0.0.2:443", "netns": "4026532177", "owner_id": ownerID, "owner_kind": kind, "owner": ownerID, "pid": "42", "comm": "sleep"}}
			}
			r.Events = []store.Event{ev("pod:shop.cart-1", "pod"), ev("process:sleep.42", "process")}
			r.Samples = append(r.Samples,
				store.Sample{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Value: 100, State: store.StateCrit},
				store.Sample{MetricID: ids["tcp_reset/sent/process:sleep.42"], Path: "tcp_reset/sent/process:sleep.42", Value: 100, State: store.StateCrit})
		}
		reports = append(reports, r)
	}
	if _, err := st.WriteReports(ctx, reports); err != nil {
		t.Fatal(err)
	}
	return st, incFrom, incTo
}

func getJSON(t *testing.T, h http.Handler, target string, out any) int {
	t.Helper()
	w := do(t, h, "GET", target, "")
	if w.Code == 200 {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("%s: %v", target, err)
		}
	}
	return w.Code
}

func findNode(nodes []*api.TreeNode, id string) *api.TreeNode {
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
		if f := findNode(n.Children, id); f != nil {
			return f
		}
	}
	return nil
}

// TestTreeAt: a metric raised in a past window and OK now is raised in the
// tree asked for that time (at= or from/to), and OK in the live tree.
func TestTreeAt(t *testing.T) {
	doc := loadDoc(t)
	now := time.Now().UTC()
	st, incFrom, incTo := pgNode(t, now)
	router, _ := server(t, st)
	ms := func(t time.Time) string { return fmt.Sprint(t.UnixMilli()) }
	mid := incFrom.Add(2*time.Minute + 30*time.Second)
	cases := []struct {
		name, query                string
		reset, sent, recent        string
		latencyNull, past, hasSent bool
		windowS                    int
	}{
		{name: "live: quiet now", query: "", reset: "ok", recent: "ok", latencyNull: true, windowS: 300},
		{name: "at the incident", query: "at=" + ms(mid), reset: "crit", sent: "crit", recent: "crit", past: true, hasSent: true, windowS: 300},
		{name: "at, RFC 3339", query: "at=" + url.QueryEscape(mid.Format(time.RFC3339)), reset: "crit", sent: "crit", recent: "crit", past: true, hasSent: true, windowS: 300},
		{name: "the incident's window: as of its end, raised then", query: "from=" + ms(incFrom) + "&to=" + ms(incTo.Add(-time.Second)), reset: "crit", sent: "crit", recent: "crit", past: true, hasSent: true, windowS: int(incTo.Add(-time.Second).Sub(incFrom).Seconds())},
		{name: "a window after it: OK, and quiet", query: "from=" + ms(incTo.Add(5*time.Minute)) + "&to=" + ms(incTo.Add(15*time.Minute)), reset: "ok", sent: "ok", recent: "ok", latencyNull: true, past: true, hasSent: true, windowS: 600},
		{name: "at after it, window covering it: OK now, was CRIT", query: "at=" + ms(incTo.Add(3*time.Minute)) + "&window=10m", reset: "ok", sent: "ok", recent: "crit", latencyNull: true, past: true, hasSent: true, windowS: 600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := api.Prefix + "/nodes/web-1/tree?" + c.query
			w := do(t, router, "GET", target, "")
			if w.Code != 200 {
				t.Fatalf("HTTP %d %s", w.Code, w.Body)
			}
			if err := doc.CheckResponse("GET", "/nodes/{node}/tree", w.Code, w.Body.Bytes()); err != nil {
				t.Error(err)
			}
			var tr api.Tree
			if err := json.Unmarshal(w.Body.Bytes(), &tr); err != nil {
				t.Fatal(err)
			}
			if (tr.At != nil) != c.past || tr.WindowS != c.windowS || tr.Stale {
				t.Errorf("at %v window_s %d stale %v; want past %v window %d, not stale", tr.At, tr.WindowS, tr.Stale, c.past, c.windowS)
			}
			r := findNode(tr.Roots, "tcp_reset")
			if r == nil || r.State != c.reset || r.RecentState != c.recent {
				t.Fatalf("tcp_reset %+v; want state %s recent %s", r, c.reset, c.recent)
			}
			if s := findNode(tr.Roots, "tcp_reset/sent"); c.sent != "" && (s == nil || s.State != c.sent) {
				t.Errorf("tcp_reset/sent %+v, want %s", s, c.sent)
			}
			if c.reset == "crit" && (r.Value == nil || *r.Value != 10 || r.Count == nil || *r.Count != 600) {
				t.Errorf("tcp_reset value %v count %v; want 10/s, 600 in the minute", r.Value, r.Count)
			}
			// Raised first; the agent's own root last.
			if c.reset == "crit" && tr.Roots[0].ID != "tcp_reset" {
				t.Errorf("first root %s, want the raised tcp_reset", tr.Roots[0].ID)
			}
			if last := tr.Roots[len(tr.Roots)-1]; last.ID != "agent" {
				t.Errorf("last root %s, want agent", last.ID)
			}
			lat := findNode(tr.Roots, "latency")
			if c.latencyNull != (lat.Value == nil) {
				t.Errorf("latency value %v; want null: %v (no samples is no value, never 0)", lat.Value, c.latencyNull)
			}
		})
	}
	for _, bad := range []string{"at=x", "at=1&from=2000&to=3000", "from=3000&to=2000", "from=0&to=" + ms(now)} {
		if w := do(t, router, "GET", api.Prefix+"/nodes/web-1/tree?"+bad, ""); w.Code != 400 {
			t.Errorf("tree?%s: HTTP %d %s, want 400", bad, w.Code, w.Body)
		}
	}
}

// TestSeriesBatch: one request for many metrics, bounded, with no value
// (null) for a histogram's steps without samples.
func TestSeriesBatch(t *testing.T) {
	doc := loadDoc(t)
	now := time.Now().UTC()
	st, incFrom, _ := pgNode(t, now)
	router, _ := server(t, st)
	for _, step := range []string{"1m", "10s"} {
		t.Run("step "+step, func(t *testing.T) {
			q := url.Values{"metric": {"tcp_reset", "latency", "nope", "tcp_reset"}, "from": {fmt.Sprint(now.Add(-time.Hour).Truncate(time.Minute).UnixMilli())}, "step": {step}}
			w := do(t, router, "GET", api.Prefix+"/nodes/web-1/series/batch?"+q.Encode(), "")
			if w.Code != 200 {
				t.Fatalf("HTTP %d %s", w.Code, w.Body)
			}
			if err := doc.CheckResponse("GET", "/nodes/{node}/series/batch", w.Code, w.Body.Bytes()); err != nil {
				t.Error(err)
			}
			var b api.SeriesBatch
			if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Series) != 2 || b.Series[0].Metric != "tcp_reset" || b.Series[1].Metric != "latency" {
				t.Fatalf("series %+v; want tcp_reset and latency once each, the unknown left out", b.Series)
			}
			var nulls, values int
			for _, p := range b.Series[1].Points {
				inIncident := !p.Time.Before(incFrom) && p.Time.Before(incFrom.Add(5*time.Minute))
				switch {
				case p.Value == nil && !inIncident:
					nulls++
				case p.Value != nil && inIncident && *p.Value > 0:
					values++
				default:
					t.Errorf("latency at %v: value %v (in the incident: %v)", p.Time, p.Value, inIncident)
				}
			}
			if nulls == 0 || values == 0 {
				t.Errorf("latency: %d null steps, %d with values; want both", nulls, values)
			}
			for _, p := range b.Series[0].Points {
				if p.Value == nil {
					t.Errorf("tcp_reset at %v: null; a rate of a step the node reported is a number", p.Time)
					break
				}
			}
		})
	}
	many := url.Values{}
	for i := range 65 {
		many.Add("metric", fmt.Sprintf("m%d", i))
	}
	for _, c := range []struct{ name, query, want string }{
		{"none", "", "metric is required"},
		{"65 metrics", many.Encode(), "at most 64"},
		{"a bad id", "metric=a//b", "is not a metric id"},
	} {
		if w := do(t, router, "GET", api.Prefix+"/nodes/web-1/series/batch?"+c.query, ""); w.Code != 400 || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: HTTP %d %s; want 400 with %q", c.name, w.Code, w.Body, c.want)
		}
	}
}

// TestCustomerNodeView: a customer's tree, series and evidence lack the
// agent's root, other processes' owner children and flags; staff's have them.
func TestCustomerNodeView(t *testing.T) {
	now := time.Now().UTC()
	st, incFrom, _ := pgNode(t, now)
	a := api.New(st, live{"web-1": true}, nil, slog.New(slog.DiscardHandler), telemetry.New())
	as := func(p access.Principal) http.Handler {
		r := chi.NewRouter()
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				next.ServeHTTP(w, req.WithContext(access.WithPrincipal(req.Context(), p)))
			})
		})
		r.Get("/nodes/{node}", a.GetNode)
		r.Get("/nodes/{node}/tree", a.GetTree)
		r.Get("/nodes/{node}/series", a.GetSeries)
		r.Get("/nodes/{node}/series/batch", a.GetSeriesBatch)
		r.Get("/nodes/{node}/events", a.GetEvents)
		return r
	}
	customer := as(access.Principal{Name: "acme", Role: access.RoleCustomer, Via: access.ViaToken, Selector: access.Selector{"customer": "acme"}})
	viewer := as(access.Principal{Name: "v", Role: access.RoleViewer, Via: access.ViaToken})
	at := "?at=" + fmt.Sprint(incFrom.Add(2*time.Minute).UnixMilli())
	for _, c := range []struct {
		name   string
		h      http.Handler
		hidden bool
	}{{"customer", customer, true}, {"viewer", viewer, false}} {
		t.Run(c.name, func(t *testing.T) {
			var tr api.Tree
			if code := getJSON(t, c.h, "/nodes/web-1/tree"+at, &tr); code != 200 {
				t.Fatalf("tree: HTTP %d", code)
			}
			for _, id := range []string{"agent", "tcp_reset/sent/process:sleep.42"} {
				if got := findNode(tr.Roots, id) != nil; got == c.hidden {
					t.Errorf("%s in the tree: %v, want %v", id, got, !c.hidden)
				}
			}
			var n api.NodeSummary
			if code := getJSON(t, c.h, "/nodes/web-1", &n); code != 200 {
				t.Fatalf("node: HTTP %d", code)
			}
			if got := findNode(n.Roots, "agent") != nil; got == c.hidden {
				t.Errorf("agent root in the summary: %v, want %v", got, !c.hidden)
			}
			var s api.Series
			code := getJSON(t, c.h, "/nodes/web-1/series?metric=agent", &s)
			if want := map[bool]int{true: 404, false: 200}[c.hidden]; code != want {
				t.Errorf("series of agent: HTTP %d, want %d", code, want)
			}
			var b api.SeriesBatch
			if code := getJSON(t, c.h, "/nodes/web-1/series/batch?metric=agent&metric=tcp_reset", &b); code != 200 || len(b.Series) != map[bool]int{true: 1, false: 2}[c.hidden] {
				t.Errorf("batch: HTTP %d, %d series", code, len(b.Series))
			}
			var ev api.EventList
			if code := getJSON(t, c.h, "/nodes/web-1/events?metric=tcp_reset/sent&limit=1000", &ev); code != 200 || len(ev.Events) == 0 {
				t.Fatalf("events: HTTP %d, %d events", code, len(ev.Events))
			}
			for _, e := range ev.Events {
				for _, k := range []string{"pid", "comm", "netns"} {
					if _, ok := e.Fields[k]; ok == c.hidden {
						t.Errorf("event field %s present: %v, want %v", k, ok, !c.hidden)
						break
					}
				}
			}
		})
	}
}

// TestOwnerChildEvents: an owner child lists the events its parent holds
// for that owner, and only those.
func TestOwnerChildEvents(t *testing.T) {
	now := time.Now().UTC()
	st, incFrom, incTo := pgNode(t, now)
	router, _ := server(t, st)
	q := "&from=" + fmt.Sprint(incFrom.Add(-time.Minute).UnixMilli()) + "&to=" + fmt.Sprint(incTo.Add(time.Minute).UnixMilli())
	var parent, child api.EventList
	for target, out := range map[string]*api.EventList{
		"tcp_reset/sent&limit=1000":                 &parent,
		"tcp_reset/sent/pod:shop.cart-1&limit=1000": &child,
	} {
		if code := getJSON(t, router, api.Prefix+"/nodes/web-1/events?metric="+target+q, out); code != 200 {
			t.Fatalf("%s: HTTP %d", target, code)
		}
	}
	if len(child.Events) == 0 || len(child.Events)*2 != len(parent.Events) {
		t.Fatalf("the pod's child lists %d events, its parent %d; want half (one of two owners per report)", len(child.Events), len(parent.Events))
	}
	for i, e := range child.Events {
		if e.Fields["owner_id"] != "pod:shop.cart-1" || e.Metric != "tcp_reset/sent" {
			t.Errorf("event %d: %s %v, want the parent's events of pod:shop.cart-1", i, e.Metric, e.Fields)
		}
		if i > 0 && e.Time.After(child.Events[i-1].Time) {
			t.Errorf("event %d is newer than the one before: not newest first", i)
		}
	}
	var limited api.EventList
	if code := getJSON(t, router, api.Prefix+"/nodes/web-1/events?metric=tcp_reset/sent/pod:shop.cart-1&limit=3"+q, &limited); code != 200 || len(limited.Events) != 3 {
		t.Errorf("limit=3: HTTP %d, %d events", code, len(limited.Events))
	}
}
