package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

func TestCompareNames(t *testing.T) {
	cases := []struct {
		in   []string
		want []string
	}{
		{[]string{"sim-10", "sim-2", "sim-1", "sim-100", "sim-9"}, []string{"sim-1", "sim-2", "sim-9", "sim-10", "sim-100"}},
		{[]string{"web-10.b", "web-2.b", "web-2.a", "db-3"}, []string{"db-3", "web-2.a", "web-2.b", "web-10.b"}},
		{[]string{"Web-2", "web-1", "WEB-3"}, []string{"web-1", "Web-2", "WEB-3"}},
		// Leading zeros tie on the number, then order by bytes: total.
		{[]string{"n-2", "n-02", "n-002", "n-1"}, []string{"n-1", "n-002", "n-02", "n-2"}},
		{[]string{"a", "a1", "", "1", "10a", "2a"}, []string{"", "1", "2a", "10a", "a", "a1"}},
		{[]string{"x99999999999999999999999", "x100000000000000000000000"}, []string{"x99999999999999999999999", "x100000000000000000000000"}},
	}
	for _, c := range cases {
		got := slices.Clone(c.in)
		slices.SortFunc(got, store.CompareNames)
		if !slices.Equal(got, c.want) {
			t.Errorf("sort %v: %v, want %v", c.in, got, c.want)
		}
		for _, a := range c.in {
			for _, b := range c.in {
				if x, y := store.CompareNames(a, b), store.CompareNames(b, a); x != -y || (x == 0) != (a == b) {
					t.Errorf("CompareNames(%q, %q) = %d, reversed %d", a, b, x, y)
				}
			}
		}
	}
}

// fleetFixture registers nodes with a root "ping" and a child
// "ping/peer" and an "agent" root, and writes their reports.
type fleetFixture struct {
	t   *testing.T
	st  *store.Store
	ids map[string]int32
	mid map[int32]map[string]int32
	seq uint64
}

func (f *fleetFixture) node(name string, labels map[string]string) int32 {
	ctx := context.Background()
	id, err := f.st.UpsertNode(ctx, store.Node{Name: name, Labels: labels, IntervalMS: 10000})
	if err != nil {
		f.t.Fatal(err)
	}
	mids, err := f.st.UpsertDefinitions(ctx, id, []store.MetricDef{
		{Path: "agent", Title: "Agent overhead", Unit: "% of a CPU", Kind: store.KindGauge},
		{Path: "ping", Title: "Round-trip time to peers", Unit: "ms", Kind: store.KindGauge},
		{Path: "ping/peer", Title: "Round-trip time to the peer gw", Unit: "ms", Kind: store.KindGauge},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.ids[name] = id
	f.mid[id] = mids
	return id
}

// report writes a report of ping in state s (its child too when s is not
// OK) at time at.
func (f *fleetFixture) report(name string, at time.Time, s store.State) {
	id := f.ids[name]
	f.seq++
	samples := []store.Sample{{MetricID: f.mid[id]["ping"], Path: "ping", Value: 2, State: s},
		{MetricID: f.mid[id]["agent"], Path: "agent", Value: 0.1, State: store.StateOK}}
	if s != store.StateOK {
		samples = append(samples, store.Sample{MetricID: f.mid[id]["ping/peer"], Path: "ping/peer", Value: 9, State: s})
	}
	if _, err := f.st.WriteReports(context.Background(), []store.Report{{NodeID: id, Seq: f.seq, Time: at, IntervalMS: 10000, Samples: samples}}); err != nil {
		f.t.Fatal(err)
	}
}

func names(p store.FleetPage) []string {
	var out []string
	for _, e := range p.Entries {
		out = append(out, e.Node.Name)
	}
	return out
}

// TestFleet: a page of the fleet is filtered, counted, ordered and paged
// over every node the scope sees, with each node's roots and since when
// they are in their state.
func TestFleet(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	f := &fleetFixture{t: t, st: st, ids: map[string]int32{}, mid: map[int32]map[string]int32{}}
	now := time.Now().Truncate(time.Millisecond)
	acme, globex := map[string]string{"customer": "acme"}, map[string]string{"customer": "globex"}
	for _, n := range []struct {
		name   string
		labels map[string]string
		state  store.State
		ago    time.Duration
	}{
		{"sim-10", acme, store.StateCrit, 5 * time.Second},
		{"sim-2", acme, store.StateOK, 5 * time.Second},
		{"sim-1", acme, store.StateWarn, 2 * time.Second},
		{"sim-3", globex, store.StateOK, 3 * time.Second},
		{"old-1", globex, store.StateCrit, time.Hour}, // stale: unknown whatever it said
	} {
		f.node(n.name, n.labels)
		f.report(n.name, now.Add(-n.ago), n.state)
	}
	f.node("new-1", acme) // never reported: unknown

	q := func(m func(*store.FleetQuery)) store.FleetQuery {
		fq := store.FleetQuery{Limit: 100, Now: now, StaleAfter: 3}
		if m != nil {
			m(&fq)
		}
		return fq
	}
	customer := access.Principal{Name: "c", Role: access.RoleCustomer, Via: access.ViaToken, Selector: access.Selector{"customer": "acme"}}
	cases := []struct {
		name    string
		scope   store.Scope
		q       store.FleetQuery
		want    []string
		total   int
		matched int
		counts  map[store.State]int
	}{
		{"by state", store.All{}, q(nil), []string{"sim-10", "sim-1", "new-1", "old-1", "sim-2", "sim-3"}, 6, 6,
			map[store.State]int{store.StateCrit: 1, store.StateWarn: 1, store.StateUnknown: 2, store.StateOK: 2}},
		{"by name, numbers as numbers", store.All{}, q(func(q *store.FleetQuery) { q.Sort = store.FleetByName }),
			[]string{"new-1", "old-1", "sim-1", "sim-2", "sim-3", "sim-10"}, 6, 6, nil},
		{"by last seen", store.All{}, q(func(q *store.FleetQuery) { q.Sort = store.FleetByLastSeen }),
			[]string{"sim-1", "sim-3", "sim-2", "sim-10", "old-1", "new-1"}, 6, 6, nil},
		{"second page", store.All{}, q(func(q *store.FleetQuery) { q.Sort, q.Offset, q.Limit = store.FleetByName, 2, 3 }),
			[]string{"sim-1", "sim-2", "sim-3"}, 6, 6, nil},
		{"past the end", store.All{}, q(func(q *store.FleetQuery) { q.Offset = 10 }), nil, 6, 6, nil},
		{"states filter the page, not the counts", store.All{}, q(func(q *store.FleetQuery) {
			q.States = []store.State{store.StateOK, store.StateCrit}
		}), []string{"sim-10", "sim-2", "sim-3"}, 6, 3,
			map[store.State]int{store.StateCrit: 1, store.StateWarn: 1, store.StateUnknown: 2, store.StateOK: 2}},
		{"name, ignoring case", store.All{}, q(func(q *store.FleetQuery) { q.Name = "SIM-1" }), []string{"sim-10", "sim-1"}, 2, 2,
			map[store.State]int{store.StateCrit: 1, store.StateWarn: 1, store.StateUnknown: 0, store.StateOK: 0}},
		{"labels", store.All{}, q(func(q *store.FleetQuery) { q.Labels = globex }), []string{"old-1", "sim-3"}, 2, 2, nil},
		{"a customer sees its tenant only", customer, q(nil), []string{"sim-10", "sim-1", "new-1", "sim-2"}, 4, 4,
			map[store.State]int{store.StateCrit: 1, store.StateWarn: 1, store.StateUnknown: 1, store.StateOK: 1}},
		{"a customer's label filter cannot widen it", customer, q(func(q *store.FleetQuery) { q.Labels = globex }), nil, 0, 0, nil},
		{"nobody sees nothing", access.Principal{}, q(nil), nil, 0, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := st.Fleet(ctx, c.scope, c.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(p); !slices.Equal(got, c.want) {
				t.Errorf("nodes %v, want %v", got, c.want)
			}
			if p.Total != c.total || p.Matched != c.matched {
				t.Errorf("total %d matched %d, want %d %d", p.Total, p.Matched, c.total, c.matched)
			}
			for s, n := range c.counts {
				if p.Counts[s] != n {
					t.Errorf("count of %s: %d, want %d (%v)", s, p.Counts[s], n, p.Counts)
				}
			}
		})
	}

	t.Run("roots, stale, since", func(t *testing.T) {
		p, err := st.Fleet(ctx, store.All{}, q(func(q *store.FleetQuery) { q.Sort = store.FleetByName }))
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]store.FleetEntry{}
		for _, e := range p.Entries {
			by[e.Node.Name] = e
		}
		if e := by["old-1"]; !e.Stale || e.State != store.StateUnknown || e.Roots["ping"].State != store.StateCrit {
			t.Errorf("old-1: stale %v state %s ping %+v; want stale, unknown, its last CRIT kept", e.Stale, e.State, e.Roots["ping"])
		}
		if e := by["new-1"]; e.Reported || len(e.Roots) != 0 {
			t.Errorf("new-1 never reported: %+v", e)
		}
		e := by["sim-1"]
		if len(e.Roots) != 2 || e.Roots["ping/peer"].TimeMS != 0 {
			t.Errorf("sim-1 roots %v, want agent and ping only", e.Roots)
		}
		if r, ok := e.Raised["ping/peer"]; len(e.Raised) != 1 || !ok || r.State != store.StateWarn || r.Value != 9 {
			t.Errorf("sim-1 raised %v, want ping/peer WARN at 9", e.Raised)
		}
		if r := by["sim-2"].Raised; len(r) != 0 {
			t.Errorf("sim-2 is OK, raised %v", r)
		}
		if s := e.Roots["ping"].SinceMS; s == nil || *s != now.Add(-2*time.Second).UnixMilli() {
			t.Errorf("sim-1 ping since %v, want its first WARN report", s)
		}
	})

	t.Run("a customer's state leaves the agent's root out", func(t *testing.T) {
		id := f.node("agent-hot", acme)
		f.seq++
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, Seq: f.seq, Time: now, IntervalMS: 10000, Samples: []store.Sample{
			{MetricID: f.mid[id]["ping"], Path: "ping", Value: 1, State: store.StateOK},
			{MetricID: f.mid[id]["agent"], Path: "agent", Value: 90, State: store.StateCrit}}}}); err != nil {
			t.Fatal(err)
		}
		for _, hide := range []bool{false, true} {
			p, err := st.Fleet(ctx, store.All{}, q(func(q *store.FleetQuery) { q.Name, q.HideAgent = "agent-hot", hide }))
			if err != nil || len(p.Entries) != 1 {
				t.Fatalf("%v %v", p, err)
			}
			if want := map[bool]store.State{false: store.StateCrit, true: store.StateOK}[hide]; p.Entries[0].State != want || p.Counts[want] != 1 {
				t.Errorf("hide agent %v: state %s counts %v, want %s", hide, p.Entries[0].State, p.Counts, want)
			}
		}
	})

	t.Run("since moves only when the state does", func(t *testing.T) {
		t0 := now.Add(time.Second)
		steps := []struct {
			at    time.Time
			state store.State
			since time.Time
		}{
			{t0, store.StateWarn, now.Add(-2 * time.Second)}, // still WARN
			{t0.Add(10 * time.Second), store.StateCrit, t0.Add(10 * time.Second)},
			{t0.Add(20 * time.Second), store.StateCrit, t0.Add(10 * time.Second)},
			{t0.Add(30 * time.Second), store.StateOK, t0.Add(30 * time.Second)},
			{t0.Add(25 * time.Second), store.StateWarn, t0.Add(30 * time.Second)}, // late: moves nothing
		}
		for i, s := range steps {
			f.report("sim-1", s.at, s.state)
			p, err := st.Fleet(ctx, store.All{}, q(func(q *store.FleetQuery) { q.Name, q.Now = "sim-1", t0.Add(40*time.Second) }))
			if err != nil {
				t.Fatal(err)
			}
			var got *int64
			for _, e := range p.Entries {
				if e.Node.Name == "sim-1" {
					got = e.Roots["ping"].SinceMS
					// Raised until the OK report (step 3); the late WARN moves nothing.
					if (len(e.Raised) > 0) != (i < 3) {
						t.Errorf("step %d: raised %v", i, e.Raised)
					}
				}
			}
			if got == nil || *got != s.since.UnixMilli() {
				t.Errorf("step %d: since %v, want %d", i, got, s.since.UnixMilli())
			}
		}
	})
}
