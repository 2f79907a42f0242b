package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/api/apitest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// fakeStore answers the node routes' queries from memory, for one node
// (web-1) that reports and one (idle) that never has.
type fakeStore struct {
	now     time.Time
	nodes   []store.Node
	defs    map[int32][]store.MetricDef
	latest  map[int32]store.Latest
	pingErr error
	// What the last Series/Events call was asked.
	asked struct {
		from, to time.Time
		step     time.Duration
		limit    int
		probes   []store.FlowProbe
		except   int32
	}
	// others is evidence of nodes beyond this one's, which Counterparts
	// answers from: the node's labels, and the event.
	others []fakeOther
}

type fakeOther struct {
	labels map[string]string
	store.Counterpart
}

func newFakeStore(now time.Time) *fakeStore {
	thr := &store.Threshold{Warn: 1, Crit: 10, Comparison: "above", HoldIntervals: 1}
	f := &fakeStore{now: now,
		nodes: []store.Node{
			{ID: 1, Name: "idle", IntervalMS: 10000},
			{ID: 2, Name: "web-1", Labels: map[string]string{"customer": "acme"}, AgentVersion: "1.0", KernelRelease: "6.1.0",
				IntervalMS: 10000, Capabilities: []store.Capability{{Name: "bpf", Available: true}, {Name: "tx", Reason: "no BTF"}}},
		},
		defs: map[int32][]store.MetricDef{2: {
			{Path: "latency", Title: "Latency", Unit: "ms", Kind: store.KindHistogram, Scale: 1000},
			{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
			{Path: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: store.KindRate},
			{Path: "tcp_reset/sent/no_socket", Title: "No socket", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
		}},
		latest: map[int32]store.Latest{2: {Time: now.Add(-5 * time.Second), IntervalMS: 10000, Metrics: map[string]store.LatestValue{
			"latency":                  {Value: 1.5, State: store.StateOK, TimeMS: now.Add(-5 * time.Second).UnixMilli(), IntervalMS: 10000},
			"tcp_reset":                {Value: 40, State: store.StateOK, TimeMS: now.Add(-5 * time.Second).UnixMilli(), IntervalMS: 10000},
			"tcp_reset/sent/no_socket": {Value: 40, State: store.StateWarn, TimeMS: now.Add(-5 * time.Second).UnixMilli(), IntervalMS: 10000},
		}}},
	}
	return f
}

func (f *fakeStore) Ping(context.Context) error { return f.pingErr }

func (f *fakeStore) NodesIn(_ context.Context, scope store.Scope) ([]store.Node, error) {
	var out []store.Node
	for _, n := range f.nodes {
		if scope.Sees(n.Labels) {
			out = append(out, n)
		}
	}
	return out, nil
}

func (f *fakeStore) NodeByNameIn(_ context.Context, scope store.Scope, name string) (store.Node, error) {
	for _, n := range f.nodes {
		if n.Name == name && scope.Sees(n.Labels) {
			return n, nil
		}
	}
	return store.Node{}, fmt.Errorf("node %q: %w", name, store.ErrNotFound)
}

// seen keeps the entries of m whose node scope sees.
func seen[V any](f *fakeStore, scope store.Scope, m map[int32]V) map[int32]V {
	out := map[int32]V{}
	for _, n := range f.nodes {
		if v, ok := m[n.ID]; ok && scope.Sees(n.Labels) {
			out[n.ID] = v
		}
	}
	return out
}

func (f *fakeStore) Definitions(_ context.Context, id int32) ([]store.MetricDef, error) {
	return f.defs[id], nil
}

func (f *fakeStore) RootDefinitionsIn(_ context.Context, scope store.Scope) (map[int32][]store.MetricDef, error) {
	out := map[int32][]store.MetricDef{}
	for id, defs := range seen(f, scope, f.defs) {
		for _, d := range defs {
			if !strings.Contains(d.Path, "/") {
				out[id] = append(out[id], d)
			}
		}
	}
	return out, nil
}

func (f *fakeStore) Latest(_ context.Context, id int32) (store.Latest, bool, error) {
	l, ok := f.latest[id]
	return l, ok, nil
}

func (f *fakeStore) LatestRootsIn(_ context.Context, scope store.Scope) (map[int32]store.Latest, error) {
	return seen(f, scope, f.latest), nil
}

func (f *fakeStore) RecentByMetric(context.Context, int32, time.Time) (map[string]store.Recent, error) {
	return map[string]store.Recent{"tcp_reset/sent/no_socket": {Sum: 80, Worst: store.StateCrit}}, nil
}

func (f *fakeStore) Series(_ context.Context, _ int32, _ string, from, to time.Time, step time.Duration) ([]store.Bucket, error) {
	f.asked.from, f.asked.to, f.asked.step = from, to, step
	return []store.Bucket{
		{Start: from, Sum: 20, Max: 20, Present: 1, Reports: 1, IntervalMS: 10000, Worst: store.StateWarn},
		{Start: from.Add(step), Reports: 1, IntervalMS: 10000}, // no report carried it
	}, nil
}

func (f *fakeStore) HistogramSeries(_ context.Context, _ int32, _ string, from, _ time.Time, _ time.Duration) ([]store.HistogramBucket, error) {
	h := loglinear.New()
	h.RecordN(1500, 10)
	h.RecordN(90000, 1)
	return []store.HistogramBucket{{Start: from, Hist: h}}, nil
}

// ReadRollups answers as HistogramSeries does, from one bucket at the
// query's start: the metrics q matches of the node's definitions.
func (f *fakeStore) ReadRollups(_ context.Context, q store.RollupQuery) ([]store.SampleRow, []store.HistogramRow, error) {
	f.asked.from, f.asked.to = q.From, q.To
	var samples []store.SampleRow
	var hists []store.HistogramRow
	for _, id := range q.NodeIDs {
		for _, d := range f.defs[id] {
			if q.Match != nil && !q.Match(d.Path) {
				continue
			}
			samples = append(samples, store.SampleRow{NodeID: id, Path: d.Path, TS: q.From,
				SampleAgg: store.SampleAgg{N: 6, Sum: 12, Min: 1, Max: 3, OK: 60}})
			if d.Kind == store.KindHistogram {
				hists = append(hists, store.HistogramRow{NodeID: id, Path: d.Path, TS: q.From, Count: 11, Sum: 105000,
					Index: []int32{int32(loglinear.Index(1500)), int32(loglinear.Index(90000))}, Counts: []int64{10, 1}})
			}
		}
	}
	return samples, hists, nil
}

func (f *fakeStore) Events(_ context.Context, _ int32, path string, from, to time.Time, limit int) ([]store.StoredEvent, error) {
	f.asked.from, f.asked.to, f.asked.limit = from, to, limit
	return []store.StoredEvent{
		{Time: to.Add(-time.Minute), Metric: path + "/no_socket", Fields: map[string]string{"saddr": "10.0.0.1", "dport": "9"}},
		{Time: to.Add(-2 * time.Minute), Metric: path},
		{Time: to.Add(-3 * time.Minute), Metric: path + "/received/syn_sent", Fields: map[string]string{"src": "10.1.0.2:443", "dst": "10.1.0.1:5000"}},
		{Time: to.Add(-4 * time.Minute), Metric: path + "/received/syn_sent", Fields: map[string]string{"src": "127.0.0.1:9", "dst": "127.0.0.1:5000"}},
	}, nil
}

// Counterparts answers as the store does: the events of other nodes the
// scope sees whose endpoints match either way round, within the probe's
// span, nearest first.
func (f *fakeStore) Counterparts(_ context.Context, scope store.Scope, except int32, _ string, probes []store.FlowProbe, perProbe int) ([][]store.Counterpart, error) {
	f.asked.probes, f.asked.except = probes, except
	out := make([][]store.Counterpart, len(probes))
	for i, p := range probes {
		for _, o := range f.others {
			src, dst := o.Fields["src"], o.Fields["dst"]
			same := (src == p.Src && dst == p.Dst) || (src == p.Dst && dst == p.Src)
			if same && scope.Sees(o.labels) && !o.Time.Before(p.From) && !o.Time.After(p.To) && len(out[i]) < perProbe {
				out[i] = append(out[i], o.Counterpart)
			}
		}
	}
	return out, nil
}

type live map[string]bool

func (l live) Connected(n string) bool { return l[n] }

// ClockOffset: a connected node's clock runs 3 s ahead.
func (l live) ClockOffset(n string) (time.Duration, bool) {
	if l[n] {
		return 3 * time.Second, true
	}
	return 0, false
}

// stubParts stand in for nodeconfig and alert: each handler answers with
// its own name, so a test sees which one a route reached.
type stubParts struct{}

func answer(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) }
}

func (stubParts) ListOverrides(w http.ResponseWriter, r *http.Request) { answer("ListOverrides")(w, r) }
func (stubParts) PutOverride(w http.ResponseWriter, r *http.Request)   { answer("PutOverride")(w, r) }
func (stubParts) DeleteOverride(w http.ResponseWriter, r *http.Request) {
	answer("DeleteOverride")(w, r)
}
func (stubParts) NodeThresholds(w http.ResponseWriter, r *http.Request) {
	answer("NodeThresholds")(w, r)
}
func (stubParts) ExpandNode(w http.ResponseWriter, r *http.Request)    { answer("ExpandNode")(w, r) }
func (stubParts) ListRules(w http.ResponseWriter, r *http.Request)     { answer("ListRules")(w, r) }
func (stubParts) CreateRule(w http.ResponseWriter, r *http.Request)    { answer("CreateRule")(w, r) }
func (stubParts) GetRule(w http.ResponseWriter, r *http.Request)       { answer("GetRule")(w, r) }
func (stubParts) PutRule(w http.ResponseWriter, r *http.Request)       { answer("PutRule")(w, r) }
func (stubParts) DeleteRule(w http.ResponseWriter, r *http.Request)    { answer("DeleteRule")(w, r) }
func (stubParts) ListAlerts(w http.ResponseWriter, r *http.Request)    { answer("ListAlerts")(w, r) }
func (stubParts) GetAlert(w http.ResponseWriter, r *http.Request)      { answer("GetAlert")(w, r) }
func (stubParts) Acknowledge(w http.ResponseWriter, r *http.Request)   { answer("Acknowledge")(w, r) }
func (stubParts) Unacknowledge(w http.ResponseWriter, r *http.Request) { answer("Unacknowledge")(w, r) }
func (stubParts) Silence(w http.ResponseWriter, r *http.Request)       { answer("Silence")(w, r) }
func (stubParts) Unsilence(w http.ResponseWriter, r *http.Request)     { answer("Unsilence")(w, r) }
func (stubParts) ListIdentities(w http.ResponseWriter, r *http.Request) {
	answer("ListIdentities")(w, r)
}
func (stubParts) RevokeNode(w http.ResponseWriter, r *http.Request)   { answer("RevokeNode")(w, r) }
func (stubParts) ReenrollNode(w http.ResponseWriter, r *http.Request) { answer("ReenrollNode")(w, r) }
func (stubParts) DeleteNode(w http.ResponseWriter, r *http.Request)   { answer("DeleteNode")(w, r) }
func (stubParts) LabelNode(w http.ResponseWriter, r *http.Request)    { answer("LabelNode")(w, r) }
func (stubParts) ListBootstrapTokenInfos(w http.ResponseWriter, r *http.Request) {
	answer("ListBootstrapTokenInfos")(w, r)
}
func (stubParts) CreateBootstrapTokenHTTP(w http.ResponseWriter, r *http.Request) {
	answer("CreateBootstrapTokenHTTP")(w, r)
}
func (stubParts) RevokeBootstrapTokenHTTP(w http.ResponseWriter, r *http.Request) {
	answer("RevokeBootstrapTokenHTTP")(w, r)
}
func (stubParts) GetReport(w http.ResponseWriter, r *http.Request)  { answer("GetReport")(w, r) }
func (stubParts) GetMetrics(w http.ResponseWriter, r *http.Request) { answer("GetMetrics")(w, r) }
func (stubParts) GetStatus(w http.ResponseWriter, r *http.Request)  { answer("GetStatus")(w, r) }
func (stubParts) ListDefinitions(w http.ResponseWriter, r *http.Request) {
	answer("ListDefinitions")(w, r)
}
func (stubParts) CreateDefinition(w http.ResponseWriter, r *http.Request) {
	answer("CreateDefinition")(w, r)
}
func (stubParts) GetDefinition(w http.ResponseWriter, r *http.Request) { answer("GetDefinition")(w, r) }
func (stubParts) PutDefinition(w http.ResponseWriter, r *http.Request) { answer("PutDefinition")(w, r) }
func (stubParts) DeleteDefinition(w http.ResponseWriter, r *http.Request) {
	answer("DeleteDefinition")(w, r)
}

func (stubParts) ListFlows(w http.ResponseWriter, r *http.Request)   { answer("ListFlows")(w, r) }
func (stubParts) GetFlowEdge(w http.ResponseWriter, r *http.Request) { answer("GetFlowEdge")(w, r) }

// stubParts stand in for access's handlers too, which need a database:
// each answers with its route.
func (stubParts) HandleLogin(w http.ResponseWriter, r *http.Request)  { answer("POST /login")(w, r) }
func (stubParts) HandleLogout(w http.ResponseWriter, r *http.Request) { answer("POST /logout")(w, r) }
func (stubParts) HandleWhoAmI(w http.ResponseWriter, r *http.Request) { answer("GET /whoami")(w, r) }
func (stubParts) HandleListTokens(w http.ResponseWriter, r *http.Request) {
	answer("GET /tokens")(w, r)
}
func (stubParts) HandleCreateToken(w http.ResponseWriter, r *http.Request) {
	answer("POST /tokens")(w, r)
}
func (stubParts) HandleRevokeToken(w http.ResponseWriter, r *http.Request) {
	answer("DELETE /tokens/{id}")(w, r)
}
func (stubParts) HandleAudit(w http.ResponseWriter, r *http.Request) { answer("GET /audit")(w, r) }

// server is the whole HTTP surface over the fake store, with the route
// table it serves. Access is off (--auth.mode=none: everyone is admin), so
// these tests are about the handlers; collector/app's access test is about
// who may call them.
func server(t *testing.T, st api.Queries) (chi.Router, []api.Route) {
	t.Helper()
	acc := noAccess(t)
	a := api.New(st, live{"web-1": true}, answer("UI"), slog.New(slog.DiscardHandler), telemetry.New())
	routes := api.Routes(api.Parts{Nodes: a, NodeConfig: stubParts{}, Alerts: stubParts{}, Identities: stubParts{}, Access: stubParts{}, Reports: stubParts{}, Export: stubParts{}, Flows: stubParts{}})
	return a.Handler(routes, acc), routes
}

// noAccess is --auth.mode=none, which needs no database, answering the
// Host httptest.NewRequest sends.
func noAccess(t *testing.T) *access.Access {
	t.Helper()
	acc, err := access.New(nil, access.Config{Mode: access.ModeNone, AllowedHosts: access.StringList{"example.com"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

func do(t *testing.T, h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	return w
}

func loadDoc(t *testing.T) *apitest.Doc {
	t.Helper()
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
