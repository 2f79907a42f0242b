package store_test

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestSummaryOnChange: the fleet summary's trigger skips roots-only reports
// that change no root's state (migration 023), and readers take the roots'
// values from hot. Over a random sequence of reports — healthy, raised with
// and without the branch below, snapshots, late, at the same instant, and
// prunes — the fleet page must read exactly what a run of the trigger on
// every write would have stored (forced after each step and compared), and
// the skip must actually happen.
func TestSummaryOnChange(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	f := &fleetFixture{t: t, st: st, ids: map[string]int32{}, mid: map[int32]map[string]int32{}}
	names := []string{"sum-1", "sum-2", "sum-3"}
	for _, n := range names {
		f.node(n, nil)
	}
	rng := rand.New(rand.NewPCG(23, 1))
	t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	clock := map[string]time.Time{}
	states := []store.State{store.StateOK, store.StateWarn, store.StateCrit, store.StateUnknown}

	page := func() map[string]store.FleetEntry {
		t.Helper()
		p, err := st.Fleet(ctx, store.All{}, store.FleetQuery{Limit: 100, Now: t0.Add(time.Hour), StaleAfter: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.FleetEntry{}
		for _, e := range p.Entries {
			out[e.Node.Name] = e
		}
		return out
	}
	// force runs the trigger on every row as a write that changes states
	// would, and puts root_states back so the next write is judged as
	// before.
	force := func() {
		t.Helper()
		tx, err := st.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE saved ON COMMIT DROP AS SELECT node_id, root_states FROM node_latest;
			UPDATE node_latest SET root_states = NULL, hot = hot;
			UPDATE node_latest l SET root_states = s.root_states FROM saved s WHERE s.node_id = l.node_id`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// stale counts rows whose roots kept an older value than hot's: the
	// trigger skipped a write.
	stale := func() int {
		t.Helper()
		var n int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM node_latest
			WHERE (hot->'ping'->>'t')::bigint > (roots->'ping'->>'t')::bigint`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A scripted start, then random steps. The script is the one way a
	// roots-only report leaves something raised: a report at the same
	// instant as a raised branch; the next one, in the same states, must
	// clear it.
	script := []string{"raised with its branch", "same instant, raised", "raised, roots only"}
	skipped := 0
	for step := range 400 {
		name := names[rng.IntN(len(names))]
		if step < len(script) {
			name = names[0]
		}
		id := f.ids[name]
		at := clock[name].Add(10 * time.Second)
		if clock[name].IsZero() {
			at = t0
		}
		ping, agent := store.StateOK, store.StateOK
		child, snapshot := false, false
		what := "healthy"
		r := rng.IntN(100)
		if step < len(script) {
			what = script[step]
		}
		switch {
		case what == "raised with its branch":
			ping, child = store.StateWarn, true
		case what == "same instant, raised":
			ping, at = store.StateWarn, clock[name]
		case what == "raised, roots only" && step < len(script):
			ping = store.StateWarn
		case r < 55:
		case r < 65:
			what, ping = "raised, roots only", states[rng.IntN(len(states))]
		case r < 78:
			what, ping, child = "raised with its branch", states[1+rng.IntN(2)], true
		case r < 84:
			what, agent = "agent raised", states[rng.IntN(len(states))]
		case r < 89:
			what, snapshot, child = "snapshot", true, true
		case r < 93:
			what, at = "late", clock[name].Add(-time.Duration(1+rng.IntN(30))*time.Second)
		case r < 96:
			what, at = "same instant", clock[name]
		default:
			what = "prune"
		}
		if what == "prune" {
			cut := clock[name].Add(-time.Duration(rng.IntN(60)) * time.Second)
			if _, err := st.PruneLatest(ctx, cut, 2); err != nil {
				t.Fatal(err)
			}
		} else {
			if at.After(clock[name]) {
				clock[name] = at
			}
			f.seq++
			samples := []store.Sample{{MetricID: f.mid[id]["ping"], Path: "ping", Value: float64(step), State: ping},
				{MetricID: f.mid[id]["agent"], Path: "agent", Value: float64(step) / 10, State: agent}}
			if child {
				samples = append(samples, store.Sample{MetricID: f.mid[id]["ping/peer"], Path: "ping/peer", Value: 9, State: ping})
			}
			if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, Seq: f.seq, Time: at, IntervalMS: 10000,
				Snapshot: snapshot, Samples: samples}}); err != nil {
				t.Fatal(err)
			}
		}
		skipped += stale()
		got := page()
		force()
		if want := page(); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d (%s of %s): the fleet page reads\n%+v\nwhere the trigger run on every write gives\n%+v", step, what, name, got[name], want[name])
		}
	}
	if skipped == 0 {
		t.Fatal("the trigger never skipped a write: the test checked nothing migration 023 changed")
	}
	t.Logf("%d row-steps read with the trigger skipped", skipped)
}

// TestLatestMetricsLz4: migration 025 compresses node_latest.metrics with
// lz4 on a server that has it, as this machine's PostgreSQL does.
func TestLatestMetricsLz4(t *testing.T) {
	st := storetest.Open(t)
	var method string
	if err := st.Pool().QueryRow(context.Background(), `SELECT attcompression::text FROM pg_attribute
		WHERE attrelid = 'node_latest'::regclass AND attname = 'metrics'`).Scan(&method); err != nil {
		t.Fatal(err)
	}
	if method != "l" {
		t.Fatalf("node_latest.metrics compression %q, want l (lz4)", method)
	}
}

// TestExportReadsNewestRoots: the export takes a root's value from hot,
// where the roots-only reports the fleet summary's trigger skipped (no
// root changed state, migration 023) left it, not the value of the
// trigger's last run.
func TestExportReadsNewestRoots(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	f := &fleetFixture{t: t, st: st, ids: map[string]int32{}, mid: map[int32]map[string]int32{}}
	id := f.node("exp-1", nil)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for i, c := range []struct {
		what     string
		snapshot bool
	}{
		{"first report: the trigger runs", false},
		{"roots only, same states: skipped", false},
		{"roots only again: skipped", false},
		{"snapshot: the trigger runs", true},
		{"roots only after it: skipped", false},
	} {
		f.seq++
		ping := float64(10 + i)
		samples := []store.Sample{{MetricID: f.mid[id]["ping"], Path: "ping", Value: ping, State: store.StateOK},
			{MetricID: f.mid[id]["agent"], Path: "agent", Value: 0.5, State: store.StateOK}}
		if c.snapshot {
			samples = append(samples, store.Sample{MetricID: f.mid[id]["ping/peer"], Path: "ping/peer", Value: 3, State: store.StateOK})
		}
		at := t0.Add(time.Duration(i) * time.Second)
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, Seq: f.seq, Time: at,
			IntervalMS: 10000, Snapshot: c.snapshot, Samples: samples}}); err != nil {
			t.Fatal(err)
		}
		exp, err := st.ExportNodes(ctx, store.All{}, t0.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var got *store.LatestValue
		for _, n := range exp.Nodes {
			for _, m := range n.Metrics {
				if n.ID == id && m.Path == "ping" && m.HasLatest {
					got = &m.Latest
				}
			}
		}
		if got == nil || got.Value != ping || got.TimeMS != at.UnixMilli() {
			t.Fatalf("%s: the export reads ping %+v, want the value %v of the newest report", c.what, got, ping)
		}
	}
}
