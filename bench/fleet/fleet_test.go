// Package fleet measures the collector under a simulated fleet
// (bench/loadgen) over real gRPC, with PostgreSQL, each figure beside its
// anchor measured in the same run:
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./bench/fleet/
//
// BenchmarkFleet holds fleets of NBS_FLEET_NODES nodes (comma-separated;
// default 1000,4000) at the default 10 s interval with 5% troubled nodes,
// one connection per node up to 8,000 nodes and several nodes' streams per
// connection beyond (NBS_FLEET_NODES_PER_CONN overrides),
// and reports acknowledged samples/s, report→ack p50/p99 and the
// collector's resident memory per connected node. The collector runs as
// its own process (the real binary), so its memory is its own.
//
// BenchmarkIngestVsCopy drives the collector flat out with full-tree
// reports and then COPYs the very rows it stored into the same PostgreSQL:
// samples/s through gRPC → validation → the write path, against the
// database's raw COPY rate for the same rows.
package fleet

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/bench/collectorproc"
	"github.com/nbs-project/nbs/bench/loadgen"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// collector is the real nbs-collector binary, running on its own database.
type collector struct{ *collectorproc.Process }

// binary builds nbs-collector once per benchmark binary, or takes the one
// NBS_FLEET_COLLECTOR names (e.g. built from another commit, for an A/B).
func binary(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv("NBS_FLEET_COLLECTOR"); bin != "" {
		return bin
	}
	return collectorproc.Build(b)
}

func startCollector(b *testing.B, bin, dbURL string, nodes int) *collector {
	b.Helper()
	// NBS_FLEET_COLLECTOR_ARGS adds flags, e.g. a profile endpoint:
	// "--debug.pprof-listen-address 127.0.0.1:6061".
	return &collector{collectorproc.Start(b, bin, dbURL, nodes, strings.Fields(os.Getenv("NBS_FLEET_COLLECTOR_ARGS"))...)}
}

// metrics reads the collector's /metrics: every unlabelled sample by name.
func (c *collector) metrics(b *testing.B) map[string]float64 {
	resp, err := http.Get("http://" + c.HTTPAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// goMetrics reads the collector's own Go runtime figures from its
// /metrics: heap and goroutine stacks in use, and goroutines.
func (c *collector) goMetrics(b *testing.B) (heapKiB, stackKiB, goroutines int) {
	m := c.metrics(b)
	return int(m["go_memstats_heap_inuse_bytes"] / 1024), int(m["go_memstats_stack_inuse_bytes"] / 1024), int(m["go_goroutines"])
}

// streams is how many agent streams the collector has registered (its
// nbs_collector_streams): each had its Hello stored and its Config sent.
func (c *collector) streams(b *testing.B) int { return int(c.metrics(b)["nbs_collector_streams"]) }

// rssKiB is the collector's resident memory.
func (c *collector) rssKiB(b *testing.B) int { return procKiB(b, c.Cmd.Process.Pid, "VmRSS") }

// procKiB is a size in /proc/PID/status (VmRSS, VmHWM), in KiB.
func procKiB(b *testing.B, pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func envList(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// BenchmarkFleet: fleets at the default interval (NBS_FLEET_NODES). Each
// connects over one interval (NBS_FLEET_RAMP: over less); once every node has had a report
// acknowledged (registered_s) and two more intervals have passed, the
// figures are taken over NBS_FLEET_DURATION (default 60s): steady-state
// samples/s and report→ack percentiles, and the collector's memory per
// node over its RSS before any agent connected: its peak (KiB/node, while
// the fleet registers, as a whole fleet reconnecting after a collector
// restart does) and its median over the hold (steady_KiB/node, the cost of
// a connected node), with the Go heap and stacks in use and goroutines at the end.
func BenchmarkFleet(b *testing.B) {
	bin := binary(b)
	hold := envDuration("NBS_FLEET_DURATION", time.Minute)
	const interval = 10 * time.Second
	// NBS_FLEET_RAMP spreads the first connects over less than the
	// interval (the default), to offer Hellos faster than the collector
	// registers them: its registration rate, not the simulator's pacing.
	ramp := envDuration("NBS_FLEET_RAMP", interval)
	for _, nodes := range envList("NBS_FLEET_NODES", []int{1000, 4000}) {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for range b.N {
				c := startCollector(b, bin, pgcluster.Database(b), nodes)
				idle := c.rssKiB(b)
				// The simulator is this process: its own resident set before
				// the fleet, to count what the fleet adds.
				simIdle := procKiB(b, os.Getpid(), "VmRSS")
				perConn := nodesPerConn(nodes)
				f, err := loadgen.New(loadgen.Config{Addr: c.GRPCAddr, Nodes: nodes, Interval: interval, Ramp: ramp,
					Troubled: 0.05, ReconnectsPerHour: float64(nodes) / 10, Seed: uint64(nodes), NodesPerConn: perConn})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan loadgen.Stats, 1)
				start := time.Now()
				go func() { done <- f.Run(ctx, os.Stderr, interval) }()
				// Registration proper, from the collector's side: when every
				// node's Hello was stored and its Config sent, and how many
				// were at 20 and 60 s (the first report's ack, AllRegistered,
				// waits an interval more and for the write path).
				var hellos time.Duration
				var at20, at60 int
				var last time.Duration
				var series []string // Hellos registered, once a second
				noteHellos := func() {
					if hellos != 0 {
						return
					}
					n, since := c.streams(b), time.Since(start)
					series = append(series, strconv.Itoa(n))
					if since.Truncate(10*time.Second) != last.Truncate(10*time.Second) {
						fmt.Fprintf(os.Stderr, "collector: %d Hellos registered after %v\n", n, since.Round(time.Second))
					}
					last = since
					if since <= 20*time.Second {
						at20 = n
					}
					if since <= 60*time.Second {
						at60 = n
					}
					if n >= nodes {
						hellos = since
						fmt.Fprintf(os.Stderr, "collector: every Hello registered after %v\n", since.Round(time.Second))
					}
				}
				// RSS once a second: its peak while the fleet registers (every
				// Hello at once), and its median over the steady hold, which
				// is the cost of a connected node.
				var rss, simRSS []int
				peak := 0
				wait := func(d time.Duration, until func() bool) {
					end := time.Now().Add(d)
					for time.Now().Before(end) && (until == nil || !until()) {
						noteHellos()
						r := c.rssKiB(b)
						peak = max(peak, r)
						rss = append(rss, r)
						simRSS = append(simRSS, procKiB(b, os.Getpid(), "VmRSS"))
						time.Sleep(time.Second)
					}
				}
				wait(10*time.Minute, func() bool { return f.Stats().AllRegistered > 0 })
				registered := f.Stats().AllRegistered
				regPeak := peak
				wait(2*interval, nil)
				f.ResetLatency()
				s0 := f.Stats()
				cpu0 := c.metrics(b)
				rss, simRSS = rss[:0], simRSS[:0]
				wait(hold, nil)
				cpu1 := c.metrics(b)
				heap, stack, goroutines := c.goMetrics(b)
				// The simulator is this process: its memory beside the
				// collector's (BENCHMARKS.md, "The simulator's memory per node").
				simEnd, simPeak := procKiB(b, os.Getpid(), "VmRSS"), procKiB(b, os.Getpid(), "VmHWM")
				s1 := f.Stats()
				cancel()
				<-done
				slices.Sort(rss)
				steadyRSS := rss[len(rss)/2]
				slices.Sort(simRSS)
				simSteady := simRSS[len(simRSS)/2]
				steady := float64(s1.Samples-s0.Samples) / (s1.Elapsed - s0.Elapsed).Seconds()
				b.Logf("%d nodes, %d a connection: all registered after %v; steady state over %v: %.0f samples/s, ack p50 %v p99 %v; collector RSS idle %d KiB, peak while registering %d KiB, peak %d KiB, steady (median) %d KiB, Go heap in use at the end %d KiB, stacks %d KiB, %d goroutines; %v",
					nodes, perConn, registered.Round(time.Second), hold, steady, s1.AckP50, s1.AckP99, idle, regPeak, peak, steadyRSS, heap, stack, goroutines, s1)
				b.Logf("%d nodes: the simulator (this process) resident before the fleet %d KiB, its median over the hold %d KiB (%.1f KiB a node more), at the end %d KiB, at its peak %d KiB (%.1f KiB a node more)",
					nodes, simIdle, simSteady, float64(simSteady-simIdle)/float64(nodes), simEnd, simPeak, float64(simPeak-simIdle)/float64(nodes))
				b.Logf("%d nodes: every Hello registered (stored, Config sent) after %v (%.0f a second); %d after 20 s, %d after 60 s",
					nodes, hellos.Round(time.Second), float64(nodes)/hellos.Seconds(), at20, at60)
				b.Logf("%d nodes: Hellos registered, once a second: %s", nodes, strings.Join(series, " "))
				// The collector's CPU over the hold, and its GC's share of it
				// (the Go runtime's estimate, runtime/metrics): a collector
				// built before /metrics carried it has no GC figure.
				procCPU := cpu1["process_cpu_seconds_total"] - cpu0["process_cpu_seconds_total"]
				b.ReportMetric(100*procCPU/hold.Seconds(), "cpu_%core")
				if gc, ok := cpu1[gcCPUMetric]; ok && procCPU > 0 {
					gc -= cpu0[gcCPUMetric]
					idle := cpu1[gcIdleMetric] - cpu0[gcIdleMetric]
					b.Logf("%d nodes: collector CPU over the hold %.2f s (%.1f%% of a core), GC %.2f s (%.1f%%; idle-priority mark workers %.2f s)",
						nodes, procCPU, 100*procCPU/hold.Seconds(), gc, 100*gc/procCPU, idle)
					b.ReportMetric(100*gc/procCPU, "gc_%cpu")
				}
				// What drives the GC: its cycles a second and the bytes
				// allocated a report received over the hold (each cycle
				// scans every goroutine's stack; the allocation rate sets
				// how often one starts).
				cycles := cpu1[gcCyclesMetric] - cpu0[gcCyclesMetric]
				allocs := cpu1[allocBytesMetric] - cpu0[allocBytesMetric]
				reports := 0.0
				for _, r := range []string{"stored", "duplicate", "rejected"} {
					k := `nbs_collector_reports_total{result="` + r + `"}`
					reports += cpu1[k] - cpu0[k]
				}
				if cycles > 0 && reports > 0 {
					b.Logf("%d nodes: over the hold %.0f GC cycles (%.2f a second), %.0f MB allocated, %.0f reports: %.0f bytes a report",
						nodes, cycles, cycles/hold.Seconds(), allocs/1e6, reports, allocs/reports)
					b.ReportMetric(cycles/hold.Seconds(), "gc_cycles/s")
					b.ReportMetric(allocs/reports, "alloc_B/report")
				}
				if registered == 0 {
					b.Errorf("not every node had a report acknowledged within 10 minutes")
				}
				b.ReportMetric(hellos.Seconds(), "hellos_registered_s")
				perNode := func(kib int) float64 { return float64(kib) / float64(nodes) }
				b.ReportMetric(registered.Seconds(), "registered_s")
				b.ReportMetric(steady, "samples/s")
				b.ReportMetric(float64(s1.AckP50)/1e6, "ack_p50_ms")
				b.ReportMetric(float64(s1.AckP99)/1e6, "ack_p99_ms")
				b.ReportMetric(perNode(peak-idle), "KiB/node")
				b.ReportMetric(perNode(steadyRSS-idle), "steady_KiB/node")
				b.ReportMetric(perNode(simSteady-simIdle), "sim_steady_KiB/node")
				b.ReportMetric(perNode(heap), "heap_KiB/node")
				b.ReportMetric(perNode(stack), "stack_KiB/node")
				b.ReportMetric(float64(goroutines)/float64(nodes), "goroutines/node")
				b.ReportMetric(float64(s1.Errors), "stream_errors")
				b.ReportMetric(float64(perConn), "nodes/conn")
			}
		})
	}
}

// The Go runtime's estimate of its GC's CPU on the collector's /metrics,
// in all and by its idle-priority mark workers (which run only on a P
// with nothing else to do).
const (
	gcCPUMetric  = "go_cpu_classes_gc_total_cpu_seconds_total"
	gcIdleMetric = "go_cpu_classes_gc_mark_idle_cpu_seconds_total"
	// runtime/metrics /gc/cycles/total:gc-cycles and /gc/heap/allocs:bytes
	// as client_golang's Go collector names them.
	gcCyclesMetric   = "go_gc_duration_seconds_count"
	allocBytesMetric = "go_memstats_alloc_bytes_total"
)

// maxConnsPerProcess is how many agent connections one simulator holds: a
// process here may hold at most 20,000 open files (a hard limit), and the
// collector holds the other end of each.
const maxConnsPerProcess = 8000

// nodesPerConn is NBS_FLEET_NODES_PER_CONN, or else 1 up to
// maxConnsPerProcess nodes and as few as fit beyond: from there the
// simulator carries several nodes' streams on each connection, and the
// per-connection cost is the figure of the largest fleet below it.
func nodesPerConn(nodes int) int {
	if n := envList("NBS_FLEET_NODES_PER_CONN", nil); len(n) > 0 {
		return n[0]
	}
	return (nodes + maxConnsPerProcess - 1) / maxConnsPerProcess
}

// BenchmarkIngestVsCopy: NBS_INGEST_NODES nodes (default 800) send their
// full tree every NBS_INGEST_INTERVAL (default 100ms, the collector's
// least), offering several times what the collector can take; once every
// node has registered, a window of NBS_INGEST_DURATION (default 30s) is
// measured, the collector's fold held off (holdFolds). Then every report
// stored is folded (drainFolds, by this binary's store: for an A/B of the
// fold, build the benchmark at each revision too), the window's share of
// that time charged to its ingest, and the rows stored are COPYed into tables of the same
// shape in the same database: the anchor.
//
// The figure is the collector's only if the collector was the bottleneck:
// the fleet offered more than was taken (a node still blocked sending when
// its next report was due skips it, loadgen.Stats.Due) and the collector's
// write queue was seldom empty. A run where either fails is an error, not
// a figure: the simulator's ceiling would be measured instead.
//
// Where PostgreSQL's time goes is sampled from pg_stat_activity (dbBusy),
// and timed by pg_stat_statements when the server has it loaded
// (statementTotals), with the WAL, updates (HOT or not) and TOAST rows a
// report. Beside the rates, which a busy machine moves by 2x between runs,
// CPU a sample (cpu_ingest+fold/copy): the collector's and its backends'
// over the window and the fold's share, against the COPY's client and
// backend, from /proc.
// NBS_INGEST_PROFILE (a directory) takes the collector's CPU and
// allocation profiles over the window and this process's over the drain;
// NBS_INGEST_EXPLAIN (a file) the plans of the drain's slow statements
// (auto_explain, from the server's log).
func BenchmarkIngestVsCopy(b *testing.B) {
	bin := binary(b)
	nodes := envList("NBS_INGEST_NODES", []int{800})[0]
	interval := envDuration("NBS_INGEST_INTERVAL", 100*time.Millisecond)
	hold := envDuration("NBS_INGEST_DURATION", 30*time.Second)
	for range b.N {
		dbURL := pgcluster.Database(b)
		var pprofAddr string
		var extra []string
		if os.Getenv("NBS_INGEST_PROFILE") != "" {
			pprofAddr = collectorproc.FreeAddr(b)
			extra = []string{"--debug.pprof-listen-address", pprofAddr}
		}
		c := &collector{collectorproc.Start(b, bin, dbURL, nodes, append(strings.Fields(os.Getenv("NBS_FLEET_COLLECTOR_ARGS")), extra...)...)}
		f, err := loadgen.New(loadgen.Config{Addr: c.GRPCAddr, Nodes: nodes, Interval: interval,
			Ramp: time.Second, SnapshotEvery: time.Nanosecond, Seed: 3})
		if err != nil {
			b.Fatal(err)
		}
		// The collector's fold (every 15 s, of the minutes closed) waits:
		// whether a fold fell inside the window or not moved the figure
		// by a third. Every report is folded after the window, and the
		// window's share of that time is charged to it.
		releaseFolds := holdFolds(b, dbURL)
		// Registering 800 nodes' catalogues is not ingest: the window
		// opens once every node has had a report acknowledged.
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan loadgen.Stats, 1)
		go func() { ran <- f.Run(ctx, os.Stderr, 5*time.Second) }()
		for deadline := time.Now().Add(10 * time.Minute); f.Stats().AllRegistered == 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				cancel()
				b.Fatalf("not every node registered within 10 minutes: %v", <-ran)
			}
		}
		f.ResetLatency()
		s0 := f.Stats()
		db := sampleDB(b, dbURL)
		totals := startStatementTotals(b, dbURL)
		writes0 := readTableWrites(b, dbURL)
		cpuConn := connect(b, dbURL)
		pgCPU0 := backendCPU(b, cpuConn)
		queue := sampleQueue(b, c)
		profiled := profile(b, pprofAddr, hold/4, hold/2)
		cpu0 := c.metrics(b)["process_cpu_seconds_total"]
		time.Sleep(hold)
		s := f.Stats().Since(s0)
		cpu := c.metrics(b)["process_cpu_seconds_total"] - cpu0
		pgCPU := cpuSince(pgCPU0, backendCPU(b, cpuConn))
		shares, locked := db.shares()
		stmtMS, stmtCalls, stmtTop := totals.read(b)
		writes := readTableWrites(b, dbURL)
		emptyShare, medianQueue := queue.empty()
		cancel()
		all := <-ran
		profiled()
		b.Logf("registered in %v", all.AllRegistered.Round(100*time.Millisecond))
		c.Stop()
		releaseFolds()
		if os.Getenv("NBS_INGEST_EXPLAIN") != "" {
			// The fold's statements' plans, in the server's log.
			connect(b, dbURL, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET session_preload_libraries = auto_explain', current_database());
				EXECUTE format('ALTER DATABASE %I SET auto_explain.log_min_duration = 200', current_database());
				EXECUTE format('ALTER DATABASE %I SET auto_explain.log_analyze = on', current_database());
				EXECUTE format('ALTER DATABASE %I SET auto_explain.log_nested_statements = on', current_database()); END $$`)
		}
		stopProfile := profileDrain(b)
		drainTotals := startStatementTotals(b, dbURL)
		backlog, foldTime, foldPG, foldSelf := drainFolds(b, dbURL)
		stopProfile()
		if _, _, top := drainTotals.read(b); top != nil {
			b.Logf("pg_stat_statements over the drain's fold: %s", strings.Join(top, "; "))
		}
		if dst := os.Getenv("NBS_INGEST_EXPLAIN"); dst != "" {
			var dir string
			if err := connect(b, dbURL).QueryRow(context.Background(), `SHOW data_directory`).Scan(&dir); err != nil {
				b.Fatal(err)
			}
			if out, err := exec.Command("cp", filepath.Join(filepath.Dir(dir), "postgres.log"), dst).CombinedOutput(); err != nil {
				b.Fatalf("copy the server's log: %v: %s", err, out)
			}
		}
		copyRate, rows, samples, copyPG, copySelf := copyRate(b, dbURL)
		// Folding the window's reports is charged at the drain's time per
		// report.
		windowFold := time.Duration(float64(foldTime) * float64(s.Acked) / float64(max(backlog, 1)))
		sustained := float64(s.Samples) / (s.Elapsed + windowFold).Seconds()
		taken := s.SamplesPerSecond() / s.OfferedPerSecond()
		b.Logf("ingest: %v", s)
		b.Logf("offered %.0f samples/s (%d reports due, %d sent), taken %.0f (%.2f of offered); nodes blocked sending %.0f%% of the time; write queue empty in %.0f%% of samples, median %.0f reports waiting",
			s.OfferedPerSecond(), s.Due, s.Reports, s.SamplesPerSecond(), taken,
			100*s.SendWait.Seconds()/(float64(nodes)*s.Elapsed.Seconds()), 100*emptyShare, medianQueue)
		b.Logf("collector CPU %.2f cores; PostgreSQL client backends busy (mean backends): %s; per report stored, backend ms: %s",
			cpu/s.Elapsed.Seconds(), formatShares(shares), formatShares(perReport(shares, s.Elapsed, s.Acked)))
		b.Logf("of which waiting on a lock (another batch's rows), per report stored, backend ms: %s", formatShares(perReport(locked, s.Elapsed, s.Acked)))
		b.Logf("written per report stored: %s; node_latest: %s", writes.since(writes0, s.Acked), latestRowSize(b, dbURL))
		b.Logf("other, by statement (mean backends): %s", db.topOthers(5))
		if stmtMS != nil {
			perRep := map[string]float64{}
			for k, v := range stmtMS {
				perRep[k] = v / float64(max(s.Acked, 1))
			}
			b.Logf("pg_stat_statements over the window, backend ms per report stored: %s; calls: %v; the most: %s",
				formatShares(perRep), stmtCalls, strings.Join(stmtTop, "; "))
		}
		if shares["copy"] > 0 {
			b.Logf("beside the COPY they follow: node_latest merge %.2f, export counters %.2f", shares["node_latest merge"]/shares["copy"], shares["export counters"]/shares["copy"])
		}
		b.Logf("rollup fold of every report stored (%d): %v (%.2f ms a report); the window's %d reports charged %v: ingest with the fold %.0f samples/s",
			backlog, foldTime.Round(time.Millisecond), foldTime.Seconds()*1000/float64(max(backlog, 1)), s.Acked, windowFold.Round(time.Millisecond), sustained)
		b.Logf("COPY of the same %d report rows (%d samples and histograms): %.0f samples/s", rows, samples, copyRate)
		// CPU a sample, which a busy machine moves less than the rates:
		// the collector's and its backends' over the window, the fold's
		// (this process's and its backend's) charged at the drain's rate,
		// against this process's and its backend's for the COPY.
		ingestCPU := (time.Duration(cpu*float64(time.Second)) + pgCPU).Seconds() / float64(max(s.Samples, 1))
		drainShare := float64(s.Acked) / float64(max(backlog, 1))
		foldCPU := (foldSelf + foldPG).Seconds() * drainShare / float64(max(s.Samples, 1))
		copyCPU := (copySelf + copyPG).Seconds() / float64(max(samples, 1))
		b.Logf("CPU a sample: ingest %.2f µs (collector %.2f, PostgreSQL %.2f), its fold %.2f µs (Go %.2f, PostgreSQL %.2f); COPY %.2f µs (client %.2f, PostgreSQL %.2f): ingest with the fold %.2fx the COPY",
			ingestCPU*1e6, cpu/float64(max(s.Samples, 1))*1e6, pgCPU.Seconds()/float64(max(s.Samples, 1))*1e6,
			foldCPU*1e6, foldSelf.Seconds()*drainShare/float64(max(s.Samples, 1))*1e6, foldPG.Seconds()*drainShare/float64(max(s.Samples, 1))*1e6,
			copyCPU*1e6, copySelf.Seconds()/float64(max(samples, 1))*1e6, copyPG.Seconds()/float64(max(samples, 1))*1e6, (ingestCPU+foldCPU)/copyCPU)
		b.ReportMetric((ingestCPU+foldCPU)/copyCPU, "cpu_ingest+fold/copy")
		if taken > 0.9 || emptyShare > 0.1 {
			b.Errorf("the collector was not saturated (taken %.2f of offered, write queue empty in %.0f%% of samples): offer more (NBS_INGEST_NODES, NBS_INGEST_INTERVAL)", taken, 100*emptyShare)
		}
		b.ReportMetric(s.OfferedPerSecond(), "offered_samples/s")
		b.ReportMetric(s.SamplesPerSecond(), "ingest_samples/s")
		b.ReportMetric(sustained, "ingest+fold_samples/s")
		b.ReportMetric(copyRate, "copy_samples/s")
		b.ReportMetric(s.SamplesPerSecond()/copyRate, "ingest/copy")
		b.ReportMetric(sustained/copyRate, "ingest+fold/copy")
		b.ReportMetric(float64(s.AckP99)/1e6, "ack_p99_ms")
		for k, v := range perReport(shares, s.Elapsed, s.Acked) {
			b.ReportMetric(v, strings.ReplaceAll(k, " ", "_")+"_ms/report")
		}
		b.ReportMetric(foldTime.Seconds()*1000/float64(max(backlog, 1)), "fold_ms/report")
	}
}

// drainFolds folds every report still pending into the rollups, as the
// collector's fold would a minute later, and returns how many there were
// and how long it took.
func drainFolds(b *testing.B, dbURL string) (pending int, took, pgCPU, selfCPU time.Duration) {
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM rollup_pending`).Scan(&pending); err != nil {
		b.Fatal(err)
	}
	// The fold's backends' CPU: read by another connection, which sees
	// the pool's (it keeps them open).
	cpuConn := connect(b, dbURL)
	if _, err := st.Pool().Exec(ctx, `SELECT 1`); err != nil {
		b.Fatal(err)
	}
	pg0, self0 := backendCPU(b, cpuConn), processCPU()
	start := time.Now()
	r, err := st.FoldRollups(ctx, store.FoldOptions{Now: time.Now().Add(store.MinuteGrace + time.Minute)})
	took = time.Since(start)
	pgCPU, selfCPU = cpuSince(pg0, backendCPU(b, cpuConn)), processCPU()-self0
	if err != nil || r.Busy {
		b.Fatalf("fold the pending reports: %+v, %v", r, err)
	}
	if r.Reports != pending {
		b.Fatalf("folded %d reports of %d pending", r.Reports, pending)
	}
	return pending, took, pgCPU, selfCPU
}

// copyRate reads back every report and histogram row the collector stored
// and COPYs them, 5,000 rows a commit, into tables of the same columns and
// indexes; it returns samples (report samples plus histograms) per second.
func copyRate(b *testing.B, dbURL string) (rate float64, nrows int, samples int64, pgCPU, selfCPU time.Duration) {
	ctx := context.Background()
	conn := connect(b, dbURL,
		`CREATE TABLE copy_reports (LIKE reports INCLUDING DEFAULTS INCLUDING INDEXES)`,
		`CREATE TABLE copy_histograms (LIKE histograms INCLUDING DEFAULTS INCLUDING INDEXES)`)
	read := func(q string) [][]any {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		var out [][]any
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, v)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		return out
	}
	reports := read(`SELECT node_id, instance_id, seq, ts, interval_ms, snapshot, metric_ids, vals, states FROM reports`)
	hists := read(`SELECT node_id, instance_id, seq, ts, metric_id, count, sum, bucket_index, bucket_count FROM histograms`)
	for _, r := range reports {
		samples += int64(len(r[6].([]any)))
	}
	samples += int64(len(hists))
	copyAll := func(table string, cols []string, rows [][]any) {
		for i := 0; i < len(rows); i += 5000 {
			tx, err := conn.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows[i:min(i+5000, len(rows))])); err != nil {
				b.Fatalf("copy into %s: %v", table, err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	var pid int32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	cpu0, _ := procCPU(pid)
	self0 := processCPU()
	start := time.Now()
	copyAll("copy_reports", []string{"node_id", "instance_id", "seq", "ts", "interval_ms", "snapshot", "metric_ids", "vals", "states"}, reports)
	copyAll("copy_histograms", []string{"node_id", "instance_id", "seq", "ts", "metric_id", "count", "sum", "bucket_index", "bucket_count"}, hists)
	took := time.Since(start)
	selfCPU = processCPU() - self0
	cpu1, _ := procCPU(pid)
	return float64(samples) / took.Seconds(), len(reports), samples, cpu1 - cpu0, selfCPU
}

// BenchmarkReregistration: NBS_REREG_NODES nodes (default 1000) connect
// for the first time, then disconnect and connect again with the same tree,
// as every agent does when a collector restarts: the time until every node
// had a report acknowledged, first and again.
func BenchmarkReregistration(b *testing.B) {
	bin := binary(b)
	nodes := envList("NBS_REREG_NODES", []int{1000})[0]
	for range b.N {
		dbURL := pgcluster.Database(b)
		c := startCollector(b, bin, dbURL, nodes)
		register := func() time.Duration {
			f, err := loadgen.New(loadgen.Config{Addr: c.GRPCAddr, Nodes: nodes, Interval: 2 * time.Second, Ramp: time.Second, Seed: 5})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan loadgen.Stats, 1)
			go func() { done <- f.Run(ctx, nil, 0) }()
			deadline := time.Now().Add(10 * time.Minute)
			for f.Stats().AllRegistered == 0 && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			cancel()
			s := <-done
			if s.AllRegistered == 0 {
				b.Fatalf("not every node registered within 10 minutes: %v", s)
			}
			return s.AllRegistered
		}
		first := register()
		again := register()
		shared, perNode := catalogueBytes(b, dbURL)
		b.Logf("%d nodes: registered in %v the first time, %v again; catalogue %.1f KiB/node (%.1f KiB/node stored per node as before migration 010)",
			nodes, first.Round(100*time.Millisecond), again.Round(100*time.Millisecond), shared/float64(nodes)/1024, perNode/float64(nodes)/1024)
		b.ReportMetric(first.Seconds(), "first_s")
		b.ReportMetric(again.Seconds(), "again_s")
		b.ReportMetric(first.Seconds()/again.Seconds(), "first/again")
		b.ReportMetric(shared/float64(nodes), "catalogue_B/node")
		b.ReportMetric(perNode/float64(nodes), "per_node_layout_B/node")
	}
}

// catalogueBytes is what the fleet's metric definitions take on disk
// (node_metrics and metric_defs, with indexes), and what the same rows took
// in the layout before migration 010 (every definition stored per node,
// keyed by node and metric), built from them in the same database.
func catalogueBytes(b *testing.B, dbURL string) (shared, perNode float64) {
	ctx := context.Background()
	conn := connect(b, dbURL,
		`CREATE TABLE old_node_metrics AS SELECT nm.node_id, nm.metric_id, md.title, md.unit, md.kind, md.description,
			md.default_threshold, md.scale, md.quantile FROM node_metrics nm JOIN metric_defs md ON md.id = nm.def_id`,
		`ALTER TABLE old_node_metrics ADD PRIMARY KEY (node_id, metric_id)`,
		`VACUUM ANALYZE node_metrics`, `VACUUM ANALYZE metric_defs`, `VACUUM ANALYZE old_node_metrics`)
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('node_metrics') + pg_total_relation_size('metric_defs'),
		pg_total_relation_size('old_node_metrics')`).Scan(&shared, &perNode); err != nil {
		b.Fatal(err)
	}
	return shared, perNode
}

// connect opens a connection to dbURL for the rest of the benchmark and
// runs setup statements on it.
func connect(b *testing.B, dbURL string, setup ...string) *pgx.Conn {
	ctx := context.Background()
	conn, err := benchConn(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(ctx) })
	for _, q := range setup {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	return conn
}
