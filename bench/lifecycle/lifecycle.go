// Package lifecycle runs a compressed month: a simulated fleet
// (bench/loadgen) with Kubernetes churn — nodes replaced every day, new
// pods every day, each an owner child with a metric path of its own —
// against the collector's real ingest path and PostgreSQL, with a clock
// that runs a day every few seconds, and the retention pass
// (collector/retention) run at each simulated midnight. After each pass it
// records every table's rows and bytes on disk, so what grows without
// limit shows as a column that never levels off.
//
// The collector checks report times against its own clock, so the month
// is simulated in the past: it starts Days+1 days ago and ends a day ago,
// and the ingest limits accept reports that old. Everything the retention
// decides uses the simulated time.
package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/nbs-project/nbs/bench/loadgen"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/retention"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/collector/tenant"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const day = 24 * time.Hour

// Config is the simulated fleet and its retentions.
type Config struct {
	DBURL string
	// Nodes is the fleet's size at any time.
	Nodes int
	// Days is how many days are simulated; DayEvery is how long one takes.
	Days     int
	DayEvery time.Duration
	// Interval is the wall time between one node's reports.
	Interval time.Duration
	// ChurnPerDay is the share of nodes replaced each day; PodsPerDay the
	// new pods (owner children) each node runs each day.
	ChurnPerDay float64
	PodsPerDay  int
	// Troubled is the share of nodes streaming a subtree and evidence.
	Troubled  float64
	Retention retention.Config
	Seed      uint64
	Log       *slog.Logger
}

// Tables are the tables a day's figures cover: every table a running
// collector adds rows to.
var Tables = []string{"reports", "histograms", "events", "rollup_samples", "rollup_histograms", "node_latest",
	"node_metrics", "metric_paths", "metric_defs", "nodes", "node_credentials", "alert_instances", "alert_deliveries",
	"alert_watermarks", "audit_log", "rollup_dirty"}

// Table is one table's size after a day's pass; a partitioned table's is
// the sum of its partitions.
type Table struct {
	Rows  int64
	Bytes int64
}

// Day is the state after one simulated midnight's retention pass.
type Day struct {
	N    int       // 1 for the first midnight
	Date time.Time // the simulated midnight
	Pass retention.Stats
	// Tables by name (Tables).
	Tables  map[string]Table
	DBBytes int64
	// Fleet is the simulator's counts so far. NodesEver nodes and
	// Fleet.Pods pod paths were ever named: the anchor, what a collector
	// without a lifecycle would hold.
	Fleet     loadgen.Stats
	NodesEver int64
	// PodPaths are the metric paths of pods stored (of Fleet.Pods named).
	PodPaths int64
}

// Run simulates cfg.Days days and returns the figures of each midnight;
// progress, when not nil, gets a line per day.
func Run(ctx context.Context, cfg Config, progress io.Writer) ([]Day, error) {
	if cfg.Days < 1 || cfg.DayEvery <= 0 {
		return nil, fmt.Errorf("lifecycle: %d days of %v", cfg.Days, cfg.DayEvery)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := store.Open(ctx, cfg.DBURL, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer st.Close()

	simStart := time.Now().UTC().Truncate(day).Add(-time.Duration(cfg.Days+1) * day)
	clock := newClock(simStart, float64(day)/float64(cfg.DayEvery))

	m := telemetry.New()
	writer := ingest.NewWriter(st, ingest.DefaultWriterOptions(), cfg.Log, m)
	limits := ingest.DefaultLimits()
	limits.MaxAge = time.Duration(cfg.Days+3) * day
	// Every simulated agent connects from 127.0.0.1 (and one may be
	// reconnecting while its old stream winds down).
	limits.MaxStreamsPerIP = 2 * cfg.Nodes
	srv := ingest.NewServer(st, writer, ingest.ServerOptions{Limits: limits}, cfg.Log, m)
	admin := nodeauth.NewAdmin(st, srv, nodeauth.ModeNone, tenant.DefaultKey, cfg.Log)
	retainer := retention.New(st, admin, cfg.Retention, cfg.Log)
	grpcSrv := grpc.NewServer()
	nbsv1.RegisterAgentServiceServer(grpcSrv, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for gRPC: %w", err)
	}
	fleetCtx, stopFleet := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The fleet hangs up first, then the server, then the writer.
	defer func() {
		stopFleet()
		grpcSrv.Stop()
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { writer.Run(ctx) })
	wg.Go(func() { _ = grpcSrv.Serve(lis) })

	fleet, err := loadgen.New(loadgen.Config{Addr: lis.Addr().String(), Nodes: cfg.Nodes, Interval: cfg.Interval,
		Troubled: cfg.Troubled, SnapshotEvery: day, Clock: clock.Now, ChurnPerDay: cfg.ChurnPerDay,
		PodsPerDay: cfg.PodsPerDay, Seed: cfg.Seed, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	wg.Go(func() { fleet.Run(fleetCtx, nil, 0) })

	var days []Day
	for n := 1; n <= cfg.Days; n++ {
		midnight := simStart.Add(time.Duration(n) * day)
		select {
		case <-ctx.Done():
			return days, ctx.Err()
		case <-time.After(clock.until(midnight)):
		}
		// The day's figures are taken with the clock stopped, so each day
		// has its DayEvery of reports however long a pass takes here.
		clock.stop()
		d := Day{N: n, Date: midnight}
		// The collector's fold job, at the simulated time: every simulated
		// hour lies before the real watermark, so writers marked it late
		// and the fold recomputes it (and its day) from its minutes.
		if _, err := st.FoldRollups(ctx, store.FoldOptions{Now: midnight, MinuteRetention: cfg.Retention.Rollup1m,
			HourRetention: cfg.Retention.Rollup1h}); err != nil {
			return days, fmt.Errorf("rollup fold of day %d: %w", n, err)
		}
		if d.Pass, err = retainer.Pass(ctx, midnight); err != nil {
			return days, fmt.Errorf("retention pass of day %d: %w", n, err)
		}
		if err := measure(ctx, st, &d); err != nil {
			return days, err
		}
		// After measuring: what was stored was named by then.
		d.Fleet = fleet.Stats()
		d.NodesEver = int64(cfg.Nodes) + int64(d.Fleet.Replaced)
		days = append(days, d)
		if progress != nil {
			fmt.Fprintln(progress, d)
		}
		clock.start()
	}
	return days, nil
}

// measure vacuums the tables rows are deleted from (standing in for
// autovacuum, which a compressed day is too short for, so that freed
// space is reused as it is in production) and sizes every table.
func measure(ctx context.Context, st *store.Store, d *Day) error {
	pool := st.Pool()
	for _, t := range Tables {
		var partitioned bool
		if err := pool.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = $1::regclass`, t).Scan(&partitioned); err != nil {
			return fmt.Errorf("kind of %s: %w", t, err)
		}
		if partitioned { // only ever dropped whole
			continue
		}
		if _, err := pool.Exec(ctx, `VACUUM `+t); err != nil {
			return fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	d.Tables = make(map[string]Table, len(Tables))
	for _, t := range Tables {
		var tb Table
		// pg_partition_tree lists nothing for a table that is not partitioned.
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+t+`),
			coalesce((SELECT sum(pg_total_relation_size(relid))::bigint FROM pg_partition_tree($1::regclass)), pg_total_relation_size($1::regclass))`,
			t).Scan(&tb.Rows, &tb.Bytes)
		if err != nil {
			return fmt.Errorf("size %s: %w", t, err)
		}
		d.Tables[t] = tb
	}
	if err := pool.QueryRow(ctx, `SELECT pg_database_size(current_database()),
		(SELECT count(*) FROM metric_paths WHERE path LIKE '%/pod:%')`).Scan(&d.DBBytes, &d.PodPaths); err != nil {
		return fmt.Errorf("database size: %w", err)
	}
	return nil
}

func (d Day) String() string {
	t := d.Tables
	return fmt.Sprintf("day %2d %s: nodes %d (ever %d) metric_paths %d (pods %d of %d ever) metric_defs %d node_metrics %d node_latest %s raw %s rollups %s db %s | pass: partitions %d latest values %d definitions %d refreshed %d expired %d paths %d defs %d in %v",
		d.N, d.Date.Format("01-02"), t["nodes"].Rows, d.NodesEver, t["metric_paths"].Rows, d.PodPaths, d.Fleet.Pods,
		t["metric_defs"].Rows, t["node_metrics"].Rows, MiB(t["node_latest"].Bytes),
		MiB(t["reports"].Bytes+t["histograms"].Bytes+t["events"].Bytes), MiB(t["rollup_samples"].Bytes+t["rollup_histograms"].Bytes), MiB(d.DBBytes),
		d.Pass.Partitions, d.Pass.LatestValues, d.Pass.Definitions, d.Pass.RefreshedNodes, d.Pass.ExpiredNodes,
		d.Pass.MetricPaths, d.Pass.MetricDefs, d.Pass.Took.Round(time.Millisecond))
}

// MiB formats bytes as mebibytes.
func MiB(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

// clock is the simulated time: it runs speed times faster than the wall
// clock, and stands still while stopped.
type clock struct {
	mu      sync.Mutex
	base    time.Time // simulated time when last started or stopped
	since   time.Time // wall time then
	speed   float64
	stopped bool
}

func newClock(at time.Time, speed float64) *clock {
	return &clock{base: at, since: time.Now(), speed: speed}
}

// Now is the simulated time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now()
}

func (c *clock) now() time.Time {
	if c.stopped {
		return c.base
	}
	return c.base.Add(time.Duration(float64(time.Since(c.since)) * c.speed))
}

// until is the wall time until the simulated time reaches t.
func (c *clock) until(t time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(float64(t.Sub(c.now())) / c.speed)
}

func (c *clock) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base, c.stopped = c.now(), true
}

func (c *clock) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since, c.stopped = time.Now(), false
}
