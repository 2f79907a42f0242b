package loadgen

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// The fleet size CI holds: fleetSizeNodes simulated nodes (one connection
// each, as real agents) at the default 10 s interval, 5% troubled, for a
// minute against an in-process collector and a real PostgreSQL, with a
// handful of reconnects that resend what was not acknowledged. It must
// keep report→ack p99 under a second after registration, and store every
// acknowledged report exactly once (per node, instance and sequence),
// with the minute rollups of a fold equal to the raw reports.
//
// NBS_FLEET_SIZE_NODES overrides the size (e.g. to measure what holds on
// another machine); the default is what holds on the 2-core CI machine
// with the other packages' tests (see BENCHMARKS.md, "Fleet size in CI").
const fleetSizeNodes = 2000

func TestFleetSizeInCI(t *testing.T) {
	nodes := fleetSizeNodes
	if v := os.Getenv("NBS_FLEET_SIZE_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 8000 {
			t.Fatalf("NBS_FLEET_SIZE_NODES=%q: want 1..8000 (one connection per node)", v)
		}
		nodes = n
	}
	dbURL := pgcluster.Database(t)
	grpcAddr := startCollector(t, dbURL, nodes)

	const (
		interval = 10 * time.Second
		run      = 60 * time.Second
	)
	type report struct {
		node     string
		instance int64
		seq      int64
	}
	var mu sync.Mutex
	acked := map[report]int{}
	f, err := New(Config{
		Addr: grpcAddr, Nodes: nodes, Interval: interval, Ramp: interval,
		Troubled: 0.05, Seed: 18,
		// About ten reconnects in the minute, each resending what was
		// not acknowledged when the stream dropped.
		ReconnectsPerHour: 600, ReconnectInFlight: true,
		OnAcked: func(node string, instance, seq uint64) {
			mu.Lock()
			acked[report{node, int64(instance), int64(seq)}]++
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), run)
	defer stop()
	go func() {
		// Forget registration's latencies once the ramp is over.
		if sleep(ctx, 2*interval) {
			f.ResetLatency()
		}
	}()
	s := f.Run(ctx, testWriterAt{t}, 10*time.Second)
	t.Logf("%d nodes: %v; registered all in %v", nodes, s, s.AllRegistered.Round(time.Millisecond))
	if s.Registered != int64(nodes) {
		t.Fatalf("%d of %d nodes registered", s.Registered, nodes)
	}
	if s.Rejected != 0 {
		t.Fatalf("%d reports rejected", s.Rejected)
	}
	if s.Reconnects == 0 || s.Resent == 0 {
		t.Fatalf("%d reconnects, %d reports resent: the run did not test resending", s.Reconnects, s.Resent)
	}
	// A node's first report goes an interval after its place in the
	// ramp: each sends at least run/interval-2 reports in the run.
	if want := uint64(nodes) * uint64(run/interval-2); s.Acked < want {
		t.Fatalf("%d reports acknowledged, want at least %d", s.Acked, want)
	}
	if s.AckP99 >= time.Second {
		t.Fatalf("report→ack p99 %v at %d nodes, want < 1s", s.AckP99, nodes)
	}

	// Exactly once: each acknowledged report is stored once, none twice.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(),
		`SELECT n.name, r.instance_id, r.seq, count(*) FROM reports r JOIN nodes n ON n.id = r.node_id GROUP BY 1, 2, 3`)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[report]int{}
	for rows.Next() {
		var r report
		var c int
		if err := rows.Scan(&r.node, &r.instance, &r.seq, &c); err != nil {
			t.Fatal(err)
		}
		stored[r] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var missing, twice, ackedTwice int
	for r, n := range acked {
		if n > 1 {
			ackedTwice++ // a resend of a stored report is acked again: fine, if stored once
		}
		if stored[r] == 0 {
			missing++
			if missing <= 3 {
				t.Errorf("acknowledged report %+v is not stored", r)
			}
		}
	}
	for r, c := range stored {
		if c > 1 {
			twice++
			if twice <= 3 {
				t.Errorf("report %+v stored %d times", r, c)
			}
		}
	}
	t.Logf("%d reports acknowledged (%d of them twice, after a resend), %d stored", len(acked), ackedTwice, len(stored))
	if missing != 0 || twice != 0 {
		t.Fatalf("%d acknowledged reports missing, %d stored more than once", missing, twice)
	}
	if len(stored) > int(s.Reports) {
		t.Fatalf("%d reports stored, more than the %d sent", len(stored), s.Reports)
	}
	rollupsAreRaw(t, dbURL)
}

// startCollector runs an in-process collector on dbURL until the test
// ends and returns its gRPC address.
func startCollector(t *testing.T, dbURL string, nodes int) string {
	t.Helper()
	addr, _ := startCollectorAt(t, dbURL, nodes, "127.0.0.1:0")
	return addr
}

// startCollectorAt is startCollector listening for gRPC on grpcAddr; stop
// stops it before the test ends (once).
func startCollectorAt(t *testing.T, dbURL string, nodes int, grpcAddr string) (addr string, stop func()) {
	t.Helper()
	cfg := collectorapp.DefaultConfig()
	cfg.DBURL, cfg.GRPCAddr, cfg.HTTPAddr = dbURL, grpcAddr, "127.0.0.1:0"
	// Every simulated node comes from 127.0.0.1: allow the fleet's streams
	// from one address, with room for reconnects overlapping a close.
	room := nodes + 100
	cfg.Ingest.MaxStreams, cfg.Ingest.MaxStreamsPerIP, cfg.Ingest.MaxNodes = room, room, room
	ctx, cancel := context.WithCancel(context.Background())
	c := collectorapp.New(cfg, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("collector: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("collector did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("collector not ready within 30s")
	}
	addr, _ = c.Addrs()
	return addr, stop
}

// sleep waits d, or less when ctx ends first (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// testWriterAt logs progress lines with the test.
type testWriterAt struct{ t *testing.T }

func (w testWriterAt) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
