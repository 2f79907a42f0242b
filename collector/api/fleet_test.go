package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestFleetAPI: GET /fleet over a real store pages, sorts, filters and
// counts, each node with its roots (the agent's last), since when, and
// what explains a raised root; every answer matches the OpenAPI document.
func TestFleetAPI(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	h, _ := server(t, st)
	doc := loadDoc(t)
	now := time.Now()
	// 25 nodes sim-1…sim-25: every 5th WARN on ping (explained by its
	// peer child), sim-7 CRIT, sim-13 stale.
	for i := 1; i <= 25; i++ {
		name := fmt.Sprintf("sim-%d", i)
		id, err := st.UpsertNode(ctx, store.Node{Name: name, Labels: map[string]string{"rack": fmt.Sprint("r", i%2)}, IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		mids, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{
			{Path: "agent", Title: "Agent overhead", Unit: "% of a CPU", Kind: store.KindGauge},
			{Path: "ping", Title: "Round-trip time to peers", Unit: "ms", Kind: store.KindGauge},
			{Path: "ping/gw", Title: "Round-trip time to the gateway", Unit: "ms", Kind: store.KindGauge},
			{Path: "ping/gw/loss", Title: "Lost pings to the gateway", Unit: "pings/s", Kind: store.KindRate},
			{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate},
		})
		if err != nil {
			t.Fatal(err)
		}
		state, at := store.StateOK, now.Add(-time.Second)
		switch {
		case i == 7:
			state = store.StateCrit
		case i%5 == 0:
			state = store.StateWarn
		case i == 13:
			at = now.Add(-time.Hour)
		}
		s := []store.Sample{{MetricID: mids["agent"], Path: "agent", Value: 0.5, State: store.StateOK},
			{MetricID: mids["ping"], Path: "ping", Value: 1.5, State: state},
			{MetricID: mids["tcp_reset"], Path: "tcp_reset", Value: 20, State: store.StateOK}}
		if state != store.StateOK {
			s = append(s, store.Sample{MetricID: mids["ping/gw"], Path: "ping/gw", Value: 1.5, State: state},
				store.Sample{MetricID: mids["ping/gw/loss"], Path: "ping/gw/loss", Value: 30, State: state})
		}
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, Seq: 1, Time: at, IntervalMS: 10000, Samples: s}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(t *testing.T, q string, status int) api.Fleet {
		t.Helper()
		w := do(t, h, "GET", "/api/v1/fleet"+q, "")
		if w.Code != status {
			t.Fatalf("GET /fleet%s: %d %s, want %d", q, w.Code, w.Body, status)
		}
		if err := doc.CheckResponse("GET", "/fleet", w.Code, w.Body.Bytes()); err != nil {
			t.Errorf("GET /fleet%s: %v", q, err)
		}
		var f api.Fleet
		if status == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &f); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	names := func(f api.Fleet) []string {
		var out []string
		for _, n := range f.Nodes {
			out = append(out, n.Name)
		}
		return out
	}
	all := api.FleetCounts{OK: 18, Warn: 5, Crit: 1, Unknown: 1}
	cases := []struct {
		q       string
		want    []string
		matched int
		counts  api.FleetCounts
	}{
		{"?limit=7", []string{"sim-7", "sim-5", "sim-10", "sim-15", "sim-20", "sim-25", "sim-13"}, 25, all},
		{"?sort=name&limit=4&offset=8", []string{"sim-9", "sim-10", "sim-11", "sim-12"}, 25, all},
		{"?sort=name&state=warn&state=crit", []string{"sim-5", "sim-7", "sim-10", "sim-15", "sim-20", "sim-25"}, 6, all},
		{"?q=SIM-2&sort=name", []string{"sim-2", "sim-20", "sim-21", "sim-22", "sim-23", "sim-24", "sim-25"}, 7, api.FleetCounts{OK: 5, Warn: 2}},
		{"?label=rack%3Dr0&state=warn", []string{"sim-10", "sim-20"}, 2, api.FleetCounts{OK: 10, Warn: 2}},
		{"?sort=last_seen&limit=1&offset=24", []string{"sim-13"}, 25, all},
		{"?offset=30", nil, 25, all},
	}
	for _, c := range cases {
		t.Run(c.q, func(t *testing.T) {
			f := get(t, c.q, http.StatusOK)
			if got := names(f); !slices.Equal(got, c.want) {
				t.Errorf("nodes %v, want %v", got, c.want)
			}
			if f.Matched != c.matched || f.Counts != c.counts {
				t.Errorf("matched %d counts %+v, want %d %+v", f.Matched, f.Counts, c.matched, c.counts)
			}
		})
	}

	t.Run("a node's summary", func(t *testing.T) {
		f := get(t, "?q=sim-7&sort=name&limit=1", http.StatusOK)
		if len(f.Nodes) != 1 {
			t.Fatalf("nodes %v", names(f))
		}
		n := f.Nodes[0]
		var ids []string
		for _, r := range n.Roots {
			ids = append(ids, r.ID)
		}
		if want := []string{"ping", "tcp_reset", "agent"}; !slices.Equal(ids, want) {
			t.Errorf("roots %v, want %v (the agent's last)", ids, want)
		}
		ping := n.Roots[0]
		if ping.State != "crit" || ping.Title != "Round-trip time to peers" || ping.Since == nil || n.Since == nil || !n.Since.Equal(*ping.Since) {
			t.Errorf("ping %+v, node since %v", ping, n.Since)
		}
		if e := ping.Explains; e == nil || e.ID != "ping/gw/loss" || e.Title != "Lost pings to the gateway" || e.Value == nil || *e.Value != 3 || e.State != "crit" {
			t.Errorf("ping explained by %+v, want ping/gw/loss at 3 pings/s", e)
		}
		if r := n.Roots[1]; r.Explains != nil || r.Value == nil || *r.Value != 2 || r.Unit != "resets/s" {
			t.Errorf("tcp_reset %+v, want 2 resets/s explained by nothing", r)
		}
		if n.Stale || n.LastReport == nil {
			t.Errorf("sim-7 stale %v, last report %v", n.Stale, n.LastReport)
		}
		s := get(t, "?q=sim-13", http.StatusOK).Nodes[0]
		if !s.Stale || s.State != "unknown" || s.Since == nil || !s.Since.Equal(s.LastReport.Add(30*time.Second)) {
			t.Errorf("sim-13: stale %v state %s since %v, want stale, unknown, since its third missed report", s.Stale, s.State, s.Since)
		}
	})

	for _, q := range []string{"?limit=0", "?limit=501", "?offset=-1", "?state=red", "?sort=size", "?label=rack",
		"?label=" + strings.Repeat("a", 257), "?q=" + strings.Repeat("a", 257),
		"?" + strings.Repeat("label=a%3Db&", 17)} {
		t.Run("refused "+q[:min(len(q), 20)], func(t *testing.T) { get(t, q, http.StatusBadRequest) })
	}
}
