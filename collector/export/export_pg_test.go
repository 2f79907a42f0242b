package export_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

type fleet struct {
	st  *store.Store
	ids map[string]map[string]int32 // node → path → metric id
	nid map[string]int32
	seq uint64
}

var defs = []store.MetricDef{
	{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate},
	{Path: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: store.KindRate},
	{Path: "tcp_reset/sent/no_socket", Title: "Sent: no_socket", Unit: "resets/s", Kind: store.KindRate},
	{Path: "tcp_reset/sent/no_socket/pod-a", Title: "owner", Unit: "resets/s", Kind: store.KindRate},
	{Path: "tcp_reset/sent/no_socket/pod-b", Title: "owner", Unit: "resets/s", Kind: store.KindRate},
	{Path: "ping", Title: "Ping", Unit: "ms", Kind: store.KindGauge},
	{Path: "latency/tx", Title: "TX", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
	{Path: "newroot", Title: "Something new", Unit: "widgets/s", Kind: store.KindRate},
}

func newFleet(t *testing.T, nodes map[string]string) *fleet {
	t.Helper()
	ctx := context.Background()
	f := &fleet{st: storetest.Open(t), ids: map[string]map[string]int32{}, nid: map[string]int32{}}
	for name, tenant := range nodes {
		n := store.Node{Name: name, IntervalMS: 1000, AgentVersion: "v1", KernelRelease: "6.18"}
		if tenant != "" {
			n.Tenant, n.Labels = tenant, map[string]string{"customer": tenant}
		}
		id, err := f.st.UpsertNode(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		nd := append([]store.MetricDef(nil), defs...)
		for other := range nodes {
			if other != name {
				nd = append(nd, store.MetricDef{Path: "ping/" + other, Title: "Ping " + other, Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99})
			}
		}
		ids, err := f.st.UpsertDefinitions(ctx, id, nd)
		if err != nil {
			t.Fatal(err)
		}
		f.ids[name], f.nid[name] = ids, id
	}
	return f
}

// report writes one report of node with these values (path → value); the
// state of a path ending in "!" is WARN (raised). It returns the report so
// a test can send it again.
func (f *fleet) report(t *testing.T, node string, at time.Time, vals map[string]float64) store.Report {
	t.Helper()
	f.seq++
	r := store.Report{NodeID: f.nid[node], InstanceID: 1, Seq: f.seq, Time: at, IntervalMS: 1000}
	for p, v := range vals {
		st := store.StateOK
		if strings.HasSuffix(p, "!") {
			p, st = strings.TrimSuffix(p, "!"), store.StateWarn
		}
		kind := store.KindGauge
		for _, d := range defs {
			if d.Path == p {
				kind = d.Kind
			}
		}
		r.Samples = append(r.Samples, store.Sample{MetricID: f.ids[node][p], Path: p, Value: v, State: st, Counter: kind == store.KindRate})
	}
	f.write(t, r)
	return r
}

func (f *fleet) write(t *testing.T, rs ...store.Report) {
	t.Helper()
	if _, err := f.st.WriteReports(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
}

// find returns the value of the series of family with exactly these labels.
func find(t *testing.T, fams []*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func TestExportCountersAndFamilies(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, map[string]string{"web-1": "acme", "db-1": "globex"})
	now := time.Now()
	f.report(t, "web-1", now.Add(-4*time.Second), map[string]float64{"tcp_reset": 0, "ping": 0.5, "newroot": 0})
	r2 := f.report(t, "web-1", now.Add(-3*time.Second), map[string]float64{"tcp_reset!": 7, "tcp_reset/sent!": 7, "tcp_reset/sent/no_socket!": 7,
		"tcp_reset/sent/no_socket/pod-a": 5, "tcp_reset/sent/no_socket/pod-b": 2, "ping": 0.25, "latency/tx": 1.5, "newroot": 3})
	f.report(t, "web-1", now.Add(-2*time.Second), map[string]float64{"tcp_reset!": 4, "tcp_reset/sent!": 4, "tcp_reset/sent/no_socket!": 4,
		"tcp_reset/sent/no_socket/pod-a": 4, "ping": 0.75, "latency/tx!": 2, "newroot": 1})
	// A resend adds nothing; a late report (older than the newest) adds
	// its increase like any other.
	f.write(t, r2)
	f.report(t, "web-1", now.Add(-10*time.Second), map[string]float64{"tcp_reset": 1, "tcp_reset/sent": 1, "tcp_reset/sent/no_socket": 1})
	f.report(t, "db-1", now.Add(-time.Second), map[string]float64{"tcp_reset": 2, "ping!": 1, "ping/web-1!": 3})

	cfg := export.DefaultConfig()
	cfg.CounterHold = 0
	snap, err := export.New(f.st, cfg).Gather(ctx, store.All{})
	if err != nil {
		t.Fatal(err)
	}
	web := map[string]string{"node": "web-1", "tenant": "acme"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nbs_tcp_resets_total", web, 12},
		{"nbs_tcp_resets_total", with(web, "direction", "sent"), 12},
		{"nbs_tcp_resets_total", with(web, "direction", "sent", "reason", "no_socket"), 12},
		{"nbs_tcp_resets_by_owner_total", with(web, "direction", "sent", "reason", "no_socket", "owner", "pod-a"), 9},
		{"nbs_tcp_resets_by_owner_total", with(web, "direction", "sent", "reason", "no_socket", "owner", "pod-b"), 2},
		{"nbs_ping_delay_seconds", web, 0.00075},
		{"nbs_tx_latency_seconds", with(web, "quantile", "0.99"), 0.002},
		{"nbs_tree_increase_total", with(web, "path", "newroot"), 4},
		{"nbs_metric_state", with(web, "metric", "tcp_reset"), 2},
		{"nbs_metric_state", with(web, "metric", "tcp_reset/sent/no_socket"), 2},
		{"nbs_node_info", with(web, "agent_version", "v1", "kernel_release", "6.18"), 1},
		{"nbs_tcp_resets_total", map[string]string{"node": "db-1", "tenant": "globex"}, 2},
		{"nbs_ping_rtt_seconds", map[string]string{"node": "db-1", "tenant": "globex", "target": "web-1", "quantile": "0.99"}, 0.003},
	} {
		got, ok := find(t, snap.Families, c.name, c.labels)
		if !ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// Labels come in name order (remote write requires it).
	for _, mf := range snap.Families {
		for _, m := range mf.GetMetric() {
			for i := 1; i < len(m.GetLabel()); i++ {
				if m.GetLabel()[i-1].GetName() >= m.GetLabel()[i].GetName() {
					t.Errorf("%s: labels out of order: %v", mf.GetName(), m.GetLabel())
				}
			}
		}
	}
	if snap.Stats.Nodes != 2 || snap.Stats.Overflowed != 0 {
		t.Errorf("stats %+v, want 2 nodes, nothing overflowed", snap.Stats)
	}

	// The first increase is held back for the hold: Prometheus sees the
	// counter start below it.
	cfg.CounterHold = time.Hour
	held, err := export.New(f.st, cfg).Gather(ctx, store.All{})
	if err != nil {
		t.Fatal(err)
	}
	// web-1's tcp_reset row was born with the batch of r2 (7).
	if got, _ := find(t, held.Families, "nbs_tcp_resets_total", web); got != 12-7 {
		t.Errorf("held: nbs_tcp_resets_total = %v, want %v (the first increase held back)", got, 12-7)
	}

	// A customer sees its own tenant only, and never a ping target naming
	// another tenant's node.
	acme := access.Principal{Role: access.RoleCustomer, Selector: access.Selector{"customer": "globex"}}
	snap, err = export.New(f.st, export.DefaultConfig()).Gather(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	for _, mf := range snap.Families {
		if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(text.String(), "web-1") || !strings.Contains(text.String(), `node="db-1"`) {
		t.Errorf("globex's export names web-1 or lacks db-1:\n%s", text.String())
	}
}

func TestExportCapsKeepTotals(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, map[string]string{"web-1": ""})
	now := time.Now()
	f.report(t, "web-1", now.Add(-2*time.Second), map[string]float64{"tcp_reset!": 9, "tcp_reset/sent!": 9, "tcp_reset/sent/no_socket!": 9,
		"tcp_reset/sent/no_socket/pod-a": 5, "tcp_reset/sent/no_socket/pod-b": 4, "ping": 1})
	cfg := export.DefaultConfig()
	cfg.CounterHold, cfg.MaxSeriesPerNode = 0, 8
	snap, err := export.New(f.st, cfg).Gather(ctx, store.All{})
	if err != nil {
		t.Fatal(err)
	}
	// Eight series fit: the roots' (2 states, 2 values), then depth 1's
	// (a state, a value), depth 2's (a state, a value); the owners, deepest,
	// overflow.
	if snap.Stats.Overflowed != 2 {
		t.Fatalf("%d series overflowed at a cap of 8, want the 2 owners: %+v", snap.Stats.Overflowed, snap.Stats)
	}
	var owners float64
	for _, mf := range snap.Families {
		if mf.GetName() != "nbs_tcp_resets_by_owner_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			owners += m.GetCounter().GetValue()
		}
	}
	if owners != 9 {
		t.Errorf("owners' counters sum to %v with the overflow series, want 9", owners)
	}
	if _, ok := find(t, snap.Families, "nbs_tcp_resets_by_owner_total", map[string]string{"node": "web-1", "direction": "_overflow", "reason": "_overflow", "owner": "_overflow"}); !ok {
		t.Error("no overflow series of nbs_tcp_resets_by_owner_total")
	}
}

func TestScrapeFormatsAndMatch(t *testing.T) {
	f := newFleet(t, map[string]string{"web-1": "acme", "db-1": "globex"})
	now := time.Now()
	f.report(t, "web-1", now.Add(-time.Second), map[string]float64{"tcp_reset": 3, "ping": 1})
	f.report(t, "db-1", now.Add(-time.Second), map[string]float64{"tcp_reset": 2, "ping": 1})
	e := export.New(f.st, export.DefaultConfig())
	h := export.NewHandler(e, nil)
	staff := access.Principal{Role: access.RoleViewer}
	for _, c := range []struct {
		name, query, accept string
		code                int
		want, not           string
		ctype               string
	}{
		{"text", "", "", 200, `nbs_node_info{agent_version="v1",kernel_release="6.18",node="db-1",tenant="globex"} 1`, "", "text/plain"},
		{"openmetrics", "", "application/openmetrics-text; version=1.0.0", 200, "# EOF", "", "application/openmetrics-text"},
		{"match", "?match=customer%3Dacme", "", 200, `node="web-1"`, `node="db-1"`, "text/plain"},
		{"bad match", "?match=customer", "", 400, "match", "", "application/json"},
		{"match twice", "?match=customer%3Dacme&match=customer%3Dglobex", "", 400, "once", "", "application/json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/api/v1/export/metrics"+c.query, nil)
			if c.accept != "" {
				req.Header.Set("Accept", c.accept)
			}
			req = req.WithContext(access.WithPrincipal(req.Context(), staff))
			w := httptest.NewRecorder()
			h.GetMetrics(w, req)
			body := w.Body.String()
			if w.Code != c.code || !strings.Contains(body, c.want) || (c.not != "" && strings.Contains(body, c.not)) ||
				!strings.HasPrefix(w.Header().Get("Content-Type"), c.ctype) {
				t.Fatalf("HTTP %d %s, want %d with %q and not %q:\n%s", w.Code, w.Header().Get("Content-Type"), c.code, c.want, c.not, body)
			}
		})
	}
	// The status says what the newest scrape held: the match's, web-1
	// alone (node info, last report, its roots' states and values).
	w := httptest.NewRecorder()
	h.GetStatus(w, httptest.NewRequest("GET", "/api/v1/export/status", nil))
	var st export.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Exports) != 1 || st.Exports[0].Kind != "scrape" || st.Exports[0].Nodes != 1 || st.Exports[0].Exports != 3 || st.Exports[0].Series != 6 {
		t.Errorf("status %s: want one kind, scrape, 3 exports (the 400s read nothing), the newest of 1 node and 6 series", w.Body)
	}
}

// A counter rises on across an agent restart (a new instance, its sequence
// from 1 again), and what has not moved within the window is left out: a
// gone node, an owner that stopped.
func TestExportRestartAndWindow(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, map[string]string{"web-1": "", "gone-1": ""})
	now := time.Now()
	f.report(t, "web-1", now.Add(-50*time.Second), map[string]float64{"tcp_reset!": 3, "tcp_reset/sent/no_socket/pod-a": 3})
	f.report(t, "gone-1", now.Add(-time.Hour), map[string]float64{"tcp_reset": 5})
	// The agent restarts: instance 2, sequence 1.
	r := store.Report{NodeID: f.nid["web-1"], InstanceID: 2, Seq: 1, Time: now.Add(-time.Second), IntervalMS: 1000,
		Samples: []store.Sample{{MetricID: f.ids["web-1"]["tcp_reset"], Path: "tcp_reset", Value: 4, State: store.StateOK, Counter: true}}}
	f.write(t, r)
	// The owner's counter moved 50 s ago: inside a 5 m window, outside a
	// 10 s one. export_counters.updated is the database's clock, so move
	// it back rather than wait.
	if _, err := f.st.Pool().Exec(ctx, `UPDATE export_counters SET updated = now() - interval '50 seconds' WHERE metric_id = $1`,
		f.ids["web-1"]["tcp_reset/sent/no_socket/pod-a"]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		window time.Duration
		owner  bool
	}{{5 * time.Minute, true}, {10 * time.Second, false}} {
		cfg := export.DefaultConfig()
		cfg.CounterHold, cfg.Window = 0, c.window
		snap, err := export.New(f.st, cfg).Gather(ctx, store.All{})
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := find(t, snap.Families, "nbs_tcp_resets_total", map[string]string{"node": "web-1"}); !ok || got != 7 {
			t.Errorf("window %s: web-1's resets across the restart = %v (found %v), want 7", c.window, got, ok)
		}
		if _, ok := find(t, snap.Families, "nbs_node_info", map[string]string{"node": "gone-1", "agent_version": "v1", "kernel_release": "6.18"}); ok {
			t.Errorf("window %s: gone-1, an hour silent, is exported", c.window)
		}
		_, ok := find(t, snap.Families, "nbs_tcp_resets_by_owner_total", map[string]string{"node": "web-1", "direction": "sent", "reason": "no_socket", "owner": "pod-a"})
		if ok != c.owner {
			t.Errorf("window %s: owner pod-a (moved 50 s ago) exported %v, want %v", c.window, ok, c.owner)
		}
	}
}

// Two collectors (two exporters over one database) asked at once give one
// answer: counters and the clock are the database's.
func TestExportSameFromEveryCollector(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, map[string]string{"web-1": "acme"})
	f.report(t, "web-1", time.Now().Add(-2*time.Second), map[string]float64{"tcp_reset!": 3, "tcp_reset/sent!": 3, "ping": 1})
	text := func() string {
		snap, err := export.New(f.st, export.DefaultConfig()).Gather(ctx, store.All{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, mf := range snap.Families {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	a, b := text(), text()
	if a != b || !strings.Contains(a, "nbs_tcp_resets_total") {
		t.Errorf("two exports differ or lack resets:\n%s\n---\n%s", a, b)
	}
}
