package loadgen

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// The simulated fleet is what it claims: every node registers its whole
// tree, every acknowledged report is in PostgreSQL once (reconnects resend
// what was not acknowledged, and nothing twice), and the samples it counts
// as acknowledged are the samples stored. The same with several nodes'
// streams on each connection.
func TestFleetAgainstARealCollector(t *testing.T) {
	for _, perConn := range []int{1, 4} {
		t.Run(fmt.Sprintf("nodes_per_conn=%d", perConn), func(t *testing.T) { fleetAgainstARealCollector(t, perConn) })
	}
}

func fleetAgainstARealCollector(t *testing.T, perConn int) {
	dbURL := pgcluster.Database(t)
	const nodes = 20
	grpcAddr := startCollector(t, dbURL, nodes)

	f, err := New(Config{
		Addr: grpcAddr, Nodes: nodes, Interval: 200 * time.Millisecond, Ramp: 200 * time.Millisecond,
		Troubled: 0.25, SnapshotEvery: time.Second, ReconnectsPerHour: 3600 * 5, Seed: 7, NodesPerConn: perConn,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithTimeout(context.Background(), 4*time.Second)
	defer stopRun()
	s := f.Run(runCtx, nil, 0)
	t.Logf("%v", s)
	// A stream may end with an error on a loaded machine (the simulator
	// reconnects and resends, as an agent does); what it sent must still be
	// stored exactly once, which the database checks below hold it to.
	if s.Acked == 0 || s.Rejected != 0 {
		t.Fatalf("run: %v", s)
	}
	if s.Reconnects == 0 {
		t.Fatalf("no reconnects at a rate of one per node-second: %v", s)
	}
	// A connection per session, or one per perConn nodes for the run.
	if perConn > 1 && s.Dials != nodes/uint64(perConn) || perConn == 1 && s.Dials < nodes+s.Reconnects {
		t.Fatalf("%d connections for %d nodes, %d each, and %d reconnects", s.Dials, nodes, perConn, s.Reconnects)
	}
	if n := len(f.Tree().Defs); n < 150 || n > 260 {
		t.Fatalf("the simulated tree has %d metrics, want about 200", n)
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var gotNodes, minDefs int
	if err := conn.QueryRow(context.Background(),
		`SELECT count(*), coalesce(min(d), 0) FROM (SELECT count(*) AS d FROM node_metrics GROUP BY node_id) x`).Scan(&gotNodes, &minDefs); err != nil {
		t.Fatal(err)
	}
	if gotNodes != nodes || minDefs != len(f.Tree().Defs) {
		t.Fatalf("stored %d nodes with at least %d definitions, want %d with %d", gotNodes, minDefs, nodes, len(f.Tree().Defs))
	}
	// Reports still in flight when the run ended may be stored without
	// their ack having arrived: stored is at least acked, and at most what
	// was sent.
	var stored, samples, hists int64
	if err := conn.QueryRow(context.Background(),
		`SELECT count(*), coalesce(sum(cardinality(metric_ids)), 0) FROM reports`).Scan(&stored, &samples); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM histograms`).Scan(&hists); err != nil {
		t.Fatal(err)
	}
	if uint64(stored) < s.Acked || uint64(stored) > s.Reports {
		t.Fatalf("stored %d reports; acked %d of %d sent", stored, s.Acked, s.Reports)
	}
	var dups int64
	if err := conn.QueryRow(context.Background(),
		`SELECT count(*) FROM (SELECT node_id, seq FROM reports GROUP BY node_id, seq HAVING count(*) > 1) x`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups != 0 {
		t.Fatalf("%d reports stored twice", dups)
	}
	if uint64(samples+hists) < s.Samples {
		t.Fatalf("stored %d samples and %d histograms, fewer than the %d acknowledged", samples, hists, s.Samples)
	}
	rollupsAreRaw(t, dbURL)
}

// rollupsAreRaw folds what the collector's fold has not yet and checks the
// minute rollups against the raw reports: every stored report counted
// once, through reconnects and resends.
func rollupsAreRaw(t *testing.T, dbURL string) {
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Reports the collector had received are committed within its batch wait.
	time.Sleep(time.Second)
	for i := 0; ; i++ {
		// The collector's own fold may hold the lock.
		r, err := st.FoldRollups(ctx, store.FoldOptions{Now: time.Now().Add(store.MinuteGrace + time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Busy {
			break
		}
		if i == 100 {
			t.Fatal("the fold lock stayed busy for 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, ok, err := st.UnfoldedFrom(ctx); err != nil || ok {
		t.Fatalf("reports left unfolded after a fold of everything (%v)", err)
	}
	rows, err := st.Pool().Query(ctx, `SELECT id FROM nodes`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	q := store.RollupQuery{NodeIDs: ids, Res: store.RollupMinute, From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)}
	type key struct {
		node int32
		path string
		ts   int64
	}
	read := func(raw bool) (map[key]store.SampleAgg, map[key]uint64) {
		q.Raw = raw
		ss, hs, err := st.ReadRollups(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		samples, hists := map[key]store.SampleAgg{}, map[key]uint64{}
		for _, r := range ss {
			samples[key{r.NodeID, r.Path, r.TS.Unix()}] = r.SampleAgg
		}
		for _, r := range hs {
			hists[key{r.NodeID, r.Path, r.TS.Unix()}] = r.Count
		}
		return samples, hists
	}
	gotS, gotH := read(false)
	rawS, rawH := read(true)
	if len(rawS) == 0 || len(rawH) == 0 {
		t.Fatalf("%d sample and %d histogram buckets in the raw reports: the check checks nothing", len(rawS), len(rawH))
	}
	if len(gotS) != len(rawS) || len(gotH) != len(rawH) {
		t.Fatalf("%d sample and %d histogram minute rollups, the raw reports make %d and %d", len(gotS), len(gotH), len(rawS), len(rawH))
	}
	for k, want := range rawS {
		got := gotS[k]
		if got.N != want.N || math.Abs(got.Sum-want.Sum) > 1e-6*math.Max(1, math.Abs(want.Sum)) || got.Min != want.Min || got.Max != want.Max {
			t.Fatalf("minute rollup %+v: %+v, the raw reports make %+v", k, got, want)
		}
	}
	for k, want := range rawH {
		if gotH[k] != want {
			t.Fatalf("histogram minute rollup %+v counts %d, the raw reports %d", k, gotH[k], want)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// Nodes sharing connections (conns.go) outlive
// their collector as agents do: when it stops, their connections close;
// when it is back at the same address, every node's stream is again on
// one of the same few connections, and every node has reports
// acknowledged again.
func TestSharedConnectionsOutliveTheCollector(t *testing.T) {
	dbURL := pgcluster.Database(t)
	const nodes, perConn = 8, 4
	addr, stop := startCollectorAt(t, dbURL, nodes, "127.0.0.1:0")
	var (
		mu       sync.Mutex
		restart  time.Time
		ackedNow = map[string]bool{} // nodes acknowledged since the restart
	)
	f, err := New(Config{Addr: addr, Nodes: nodes, NodesPerConn: perConn, Interval: 200 * time.Millisecond, Ramp: 200 * time.Millisecond, Seed: 3,
		OnAcked: func(node string, _, _ uint64) {
			mu.Lock()
			defer mu.Unlock()
			if !restart.IsZero() {
				ackedNow[node] = true
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Stats, 1)
	go func() { done <- f.Run(ctx, nil, 0) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s within 60 s: %v", what, f.Stats())
			}
		}
	}
	waitFor("every node registered", func() bool { return f.Stats().Registered == nodes })
	stop()
	waitFor("every stream ended with the collector", func() bool { return f.Stats().Connected == 0 })
	mu.Lock()
	restart = time.Now()
	mu.Unlock()
	startCollectorAt(t, dbURL, nodes, addr)
	waitFor("every node acknowledged after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ackedNow) == nodes
	})
	// Each shared connection dialled once before the restart and once
	// after it (dials that failed while the collector was down count
	// none): the same nodes share it again, one node's dial serving them all.
	if s := f.Stats(); s.Dials != 2*nodes/perConn || s.Errors == 0 {
		t.Fatalf("%d connections for %d nodes, %d each, before and after the restart, and %d streams ended with an error (the collector stopped): %v", s.Dials, nodes, perConn, s.Errors, s)
	}
}
