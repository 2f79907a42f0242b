package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/store"
)

// dbBusy samples which statements PostgreSQL's client backends are
// running (pg_stat_activity, every 50 ms) while the ingest runs: a kind's
// share is the mean number of backends running it, "0.42 of a backend".
// Sampling needs nothing; pg_stat_statements (statementTotals), when the
// server was started with it preloaded, adds each statement's execution
// time and calls.
type dbBusy struct {
	mu      sync.Mutex
	samples int
	busy    map[string]int
	// locked: the samples of busy in which the statement waited on a
	// lock (another transaction's rows), not working.
	locked map[string]int
	// others: the text (its start) of what "other" counted, to name it.
	others map[string]int
	stop   func()
}

// statementKind names the write path's statements by their text.
func statementKind(q string) string {
	q = strings.ToLower(strings.TrimSpace(q))
	switch {
	case strings.HasPrefix(q, "copy"):
		return "copy"
	case strings.Contains(q, "into node_latest"):
		return "node_latest merge"
	case strings.Contains(q, "export_counters"):
		return "export counters"
	case strings.Contains(q, "rollup_pending") || strings.Contains(q, "fold_pending") || strings.Contains(q, "rollup_samples") ||
		strings.Contains(q, "rollup_histograms") || strings.Contains(q, "rollup_folds") || strings.Contains(q, "rollup_dirty"):
		return "fold"
	case q == "commit" || q == "begin" || strings.HasPrefix(q, "savepoint") || strings.HasPrefix(q, "release"):
		return "begin/commit"
	default:
		return "other"
	}
}

func sampleDB(b *testing.B, dbURL string) *dbBusy {
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := benchConn(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	d := &dbBusy{busy: map[string]int{}, locked: map[string]int{}, others: map[string]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer conn.Close(context.Background())
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := conn.Query(ctx, `SELECT query, wait_event_type IS NOT DISTINCT FROM 'Lock' FROM pg_stat_activity
				WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
			if err != nil {
				return
			}
			type active struct {
				Query  string
				Locked bool
			}
			qs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[active])
			if err != nil {
				return
			}
			d.mu.Lock()
			d.samples++
			for _, q := range qs {
				d.busy[statementKind(q.Query)]++
				if statementKind(q.Query) == "other" {
					d.others[strings.Join(strings.Fields(q.Query), " ")[:min(len(strings.Join(strings.Fields(q.Query), " ")), 60)]]++
				}
				if q.Locked {
					d.locked[statementKind(q.Query)]++
				}
			}
			d.mu.Unlock()
		}
	})
	d.stop = func() { cancel(); wg.Wait() }
	return d
}

// shares stops the sampling and returns each kind's mean backends busy,
// and of those waiting on a lock.
func (d *dbBusy) shares() (busy, locked map[string]float64) {
	d.stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	busy, locked = map[string]float64{}, map[string]float64{}
	for k, n := range d.busy {
		busy[k] = float64(n) / float64(max(d.samples, 1))
	}
	for k, n := range d.locked {
		locked[k] = float64(n) / float64(max(d.samples, 1))
	}
	return busy, locked
}

// topOthers names the statements counted as "other", most sampled first.
func (d *dbBusy) topOthers(n int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	keys := make([]string, 0, len(d.others))
	for k := range d.others {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return d.others[b] - d.others[a] })
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%q %.3f", k, float64(d.others[k])/float64(max(d.samples, 1))))
	}
	return strings.Join(out, "; ")
}

// statementTotals is pg_stat_statements over the window, when the server
// has it loaded (shared_preload_libraries: NBS_PG_BINDIR naming a
// directory made by tools/pg-stat-statements-bindir.sh): each statement
// kind's execution time, exact where sampling estimates. Without it,
// start and read return nothing.
type statementTotals struct {
	conn *pgx.Conn
}

func startStatementTotals(b *testing.B, dbURL string) *statementTotals {
	ctx := context.Background()
	conn, err := benchConn(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		b.Logf("pg_stat_statements: %v", err)
		return &statementTotals{}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		b.Logf("pg_stat_statements not loaded (%v): the sampled split only", err)
		return &statementTotals{}
	}
	return &statementTotals{conn: conn}
}

// read returns each kind's execution time (ms) and calls since start,
// and the top statements by time, with the WAL each wrote, of this
// database only.
func (t *statementTotals) read(b *testing.B) (ms map[string]float64, calls map[string]int64, top []string) {
	if t.conn == nil {
		return nil, nil, nil
	}
	rows, err := t.conn.Query(context.Background(), `SELECT query, calls, total_exec_time, wal_bytes FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time DESC`)
	if err != nil {
		b.Logf("pg_stat_statements: %v", err)
		return nil, nil, nil
	}
	defer rows.Close()
	ms, calls = map[string]float64{}, map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		var total, wal float64
		if err := rows.Scan(&q, &n, &total, &wal); err != nil {
			b.Fatal(err)
		}
		k := statementKind(q)
		ms[k] += total
		calls[k] += n
		if len(top) < 8 {
			flat := strings.Join(strings.Fields(q), " ")
			top = append(top, fmt.Sprintf("%.0f ms %d calls WAL %.0f MB %q", total, n, wal/1e6, flat[:min(len(flat), 70)]))
		}
	}
	return ms, calls, top
}

// tableWrites reads, for the write path's updated tables and their TOAST,
// the rows inserted and updated, and how many updates were HOT (no index
// entry), with the WAL position: the difference between two reads says
// what a window wrote.
type tableWrites struct {
	wal  int64
	rows map[string][3]int64 // ins, upd, hot_upd
}

func readTableWrites(b *testing.B, dbURL string) tableWrites {
	ctx := context.Background()
	conn, err := benchConn(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	// The counters are sent to the statistics system at a transaction's
	// end, by each backend at most once a second.
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		b.Fatal(err)
	}
	w := tableWrites{rows: map[string][3]int64{}}
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&w.wal); err != nil {
		b.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT c.relname, coalesce(s.n_tup_ins, 0), coalesce(s.n_tup_upd, 0), coalesce(s.n_tup_hot_upd, 0)
		FROM pg_class c JOIN pg_stat_all_tables s ON s.relid = c.oid
		WHERE c.relname IN ('node_latest', 'export_counters')
		UNION ALL
		SELECT c.relname || ' toast', t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd
		FROM pg_class c JOIN pg_stat_all_tables t ON t.relid = c.reltoastrelid
		WHERE c.relname IN ('node_latest', 'export_counters')`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v [3]int64
		if err := rows.Scan(&name, &v[0], &v[1], &v[2]); err != nil {
			b.Fatal(err)
		}
		w.rows[name] = v
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return w
}

// latestRowSize is node_latest's mean row as stored (pg_column_size: a
// value moved to TOAST counts its pointer), and its heap's pages a row.
func latestRowSize(b *testing.B, dbURL string) string {
	ctx := context.Background()
	conn, err := benchConn(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var row, vals, paths, pages float64
	if err := conn.QueryRow(ctx, `SELECT avg(pg_column_size(l.*)), avg(pg_column_size(base_vals)), avg(pg_column_size(base_paths)),
		pg_relation_size('node_latest') / 8192.0 / greatest(count(*), 1) FROM node_latest l`).Scan(&row, &vals, &paths, &pages); err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("row %.0f B inline (base_vals %.0f, base_paths %.0f), %.2f pages a row", row, vals, paths, pages)
}

// since formats what was written from w0 to w, per report stored.
func (w tableWrites) since(w0 tableWrites, reports uint64) string {
	n := float64(max(reports, 1))
	out := []string{fmt.Sprintf("WAL %.0f B", float64(w.wal-w0.wal)/n)}
	names := slices.Sorted(maps.Keys(w.rows))
	for _, k := range names {
		v, v0 := w.rows[k], w0.rows[k]
		out = append(out, fmt.Sprintf("%s ins %.2f upd %.2f (hot %.2f)", k, float64(v[0]-v0[0])/n, float64(v[1]-v0[1])/n, float64(v[2]-v0[2])/n))
	}
	return strings.Join(out, ", ")
}

// benchApp is the application_name of this benchmark's own connections
// (benchConn), whose backends' CPU is not the collector's.
const benchApp = "nbs-bench"

// benchConn connects to dbURL as benchApp.
func benchConn(ctx context.Context, dbURL string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = benchApp
	return pgx.ConnectConfig(ctx, cfg)
}

// backendCPU is the CPU time (user and system, from /proc) of the
// database's client backends but this benchmark's own (benchConn): PostgreSQL's cost
// of what they ran, which, unlike their time active, a busy machine moves
// little. A backend that exits between two reads takes its time with it;
// the collector's pool keeps its connections.
func backendCPU(b *testing.B, conn *pgx.Conn) map[int32]time.Duration {
	rows, err := conn.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND application_name <> $1`, benchApp)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	out := map[int32]time.Duration{}
	for _, pid := range pids {
		if d, ok := procCPU(pid); ok {
			out[pid] = d
		}
	}
	return out
}

// cpuSince is the CPU the backends of now spent since then.
func cpuSince(then, now map[int32]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range now {
		d += t - then[pid]
	}
	return d
}

// procCPU is a process's user and system time, from /proc/PID/stat.
func procCPU(pid int32) (time.Duration, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command (in parentheses, which may hold spaces):
	// state is field 3, utime 14 and stime 15, in clock ticks (100 a
	// second on Linux).
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, false
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// processCPU is this process's user and system time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perReport turns mean backends busy over elapsed into backend
// milliseconds per report stored.
func perReport(shares map[string]float64, elapsed time.Duration, reports uint64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range shares {
		out[k] = v * elapsed.Seconds() * 1000 / float64(max(reports, 1))
	}
	return out
}

func formatShares(s map[string]float64) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if s[a] != s[b] {
			if s[a] > s[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %.3f", k, s[k]))
	}
	return strings.Join(out, ", ")
}

// queueSampler reads the collector's write queue (reports waiting for the
// database) every 200 ms: a collector that is the bottleneck has reports
// waiting all the time, one that is offered too little drains it.
type queueSampler struct {
	mu     sync.Mutex
	values []float64
	stop   func()
}

func sampleQueue(b *testing.B, c *collector) *queueSampler {
	ctx, cancel := context.WithCancel(context.Background())
	q := &queueSampler{}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			resp, err := http.Get("http://" + c.HTTPAddr + "/metrics")
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for line := range strings.SplitSeq(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, "nbs_collector_write_queue_reports "); ok {
					var f float64
					if _, err := fmt.Sscan(v, &f); err == nil {
						q.mu.Lock()
						q.values = append(q.values, f)
						q.mu.Unlock()
					}
				}
			}
		}
	})
	q.stop = func() { cancel(); wg.Wait() }
	return q
}

// empty stops the sampling and returns the share of samples with no
// report waiting, and the median waiting.
func (q *queueSampler) empty() (share, median float64) {
	q.stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.values) == 0 {
		return 1, 0
	}
	v := slices.Clone(q.values)
	slices.Sort(v)
	n := 0
	for _, x := range v {
		if x == 0 {
			n++
		}
	}
	return float64(n) / float64(len(v)), v[len(v)/2]
}

// profile fetches the collector's CPU profile over the middle of the run
// and its allocation profile after it into NBS_INGEST_PROFILE (a
// directory), when set; the collector then serves pprof on pprofAddr.
func profile(b *testing.B, pprofAddr string, delay, seconds time.Duration) func() {
	dir := os.Getenv("NBS_INGEST_PROFILE")
	if dir == "" || pprofAddr == "" {
		return func() {}
	}
	fetch := func(path, file string) {
		resp, err := http.Get("http://" + pprofAddr + path)
		if err != nil {
			b.Logf("profile %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			b.Logf("profile %s: %v", path, err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			b.Logf("profile %s: %v", path, err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(delay)
		fetch(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(seconds.Seconds())), "cpu.pprof")
		fetch("/debug/pprof/allocs", "allocs.pprof")
	}()
	return func() { <-done }
}

// profileDrain profiles this process (whose store folds what the collector
// left pending, drainFolds) into NBS_INGEST_PROFILE/fold.pprof, when set.
func profileDrain(b *testing.B) func() {
	dir := os.Getenv("NBS_INGEST_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "fold.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// foldLockID is store.foldLockID, the advisory lock one collector's fold
// holds while it folds: holding it makes every fold return Busy.
const foldLockID = 0x6e6273_f0

// holdFolds takes the fold lock for the benchmark until the returned func
// is called, which first checks that a fold found it held. The check opens
// a Store, which migrates the database to this binary's schema: after the
// window, so a collector from another revision (NBS_FLEET_COLLECTOR) is
// measured on its own.
func holdFolds(b *testing.B, dbURL string) func() {
	ctx := context.Background()
	conn, err := benchConn(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(foldLockID)); err != nil {
		b.Fatal(err)
	}
	return func() {
		defer conn.Close(ctx)
		st, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		if r, err := st.FoldRollups(ctx, store.FoldOptions{}); err != nil || !r.Busy {
			b.Fatalf("a fold with the fold lock held: %+v, %v; want busy (store.foldLockID changed?)", r, err)
		}
	}
}
