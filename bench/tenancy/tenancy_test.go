// Package tenancy holds one customer's heavy reads against everyone else's
// service: a real collector (in process) over PostgreSQL, a simulated
// fleet reporting to it (bench/loadgen, in a process of its own), and one
// customer token running many 400-day reports of 30 nodes in parallel
// loops, as the incident that led to collector/readlimit did (24 loops
// pushed every agent's report→ack p99 from 117 ms to 9.8 s, and an
// admin's whoami to 5.4 s). In CI size, about 46 s:
//
//	NBS_REQUIRE_PG=1 go test -run TestOneCustomersReportsSlowNobodyElse -v -count=1 ./bench/tenancy/
//
// It measures the fleet's ack p99 and an admin's whoami with no reports
// (the baseline, first) and while the reports run, alternating in rounds,
// and holds the second to twice the first; and it checks that the (N+1)th
// report a caller has in flight is refused with 429 and Retry-After.
// BENCHMARKS.md ("One customer's reports") has its figures.
package tenancy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/bench/loadgen"
	"github.com/nbs-project/nbs/collector/api"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(fleetEnv); addr != "" {
		os.Exit(runFleet(addr))
	}
	pgcluster.Main(m)
}

const (
	customerNodes = 30
	// history is the days of day rollups seeded: a 400-day report reads
	// its period and the previous one.
	history     = 800
	reportDays  = 399 // under the 400-day limit, whatever the clock does meanwhile
	reportLoops = 24
	fleetNodes  = 50
	fleetEvery  = time.Second
	rounds      = 3
	baselineFor = 4 * time.Second
	loadFor     = 6 * time.Second
	settle      = time.Second
)

var (
	sampleMetrics = []store.MetricDef{
		{Path: "ping", Title: "Ping", Unit: "ms", Kind: store.KindGauge},
		{Path: "latency", Title: "Latency", Kind: store.KindGauge},
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate},
		{Path: "drops", Title: "Drops", Unit: "drops/s", Kind: store.KindRate},
		{Path: "tcp_reset/sent/no_socket", Title: "No socket", Unit: "resets/s", Kind: store.KindRate},
		{Path: "drops/netfilter_drop", Title: "Netfilter", Unit: "drops/s", Kind: store.KindRate},
		{Path: "latency/retransmits", Title: "Retransmits", Unit: "segments/s", Kind: store.KindRate},
		{Path: "ping/gw/sent", Title: "Sent", Unit: "probes/s", Kind: store.KindRate},
		{Path: "ping/gw/lost", Title: "Lost", Unit: "probes/s", Kind: store.KindRate},
	}
	histogramMetrics = []store.MetricDef{
		{Path: "ping/gw", Title: "gw", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
		{Path: "latency/tx/sendmsg_to_qdisc", Title: "sendmsg to qdisc", Unit: "us", Kind: store.KindHistogram, Scale: 1e3, Quantile: 0.99},
	}
)

// seed registers the customer's nodes and writes their day rollups for
// the history: what a 400-day report reads, COPYed straight into the
// rollup tables (the days are closed and folded, as migration 012 marks
// everything before the current hour).
func seed(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	// A day of a node's histogram: 8,640 reports' worth of a log-normal
	// around a node's median; a few shapes, reused.
	type shape struct {
		count uint64
		sum   float64
		index []int32
		n     []int64
	}
	shapes := make([]shape, 16)
	for i := range shapes {
		h := loglinear.New()
		for range 8640 {
			h.Record(uint64(3e5 * math.Exp(0.6*rng.NormFloat64()) * (1 + float64(i)/8)))
		}
		s := shape{count: h.Count, sum: h.Sum}
		for _, b := range h.Sorted() {
			s.index, s.n = append(s.index, int32(b)), append(s.n, int64(h.Counts[b]))
		}
		shapes[i] = s
	}
	var samples, hists [][]any
	for i := range customerNodes {
		id, err := st.UpsertNode(ctx, store.Node{Name: fmt.Sprintf("acme-%02d", i), Labels: map[string]string{"customer": "acme"},
			InstanceID: uint64(i + 1), IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.UpsertDefinitions(ctx, id, slices.Concat(sampleMetrics, histogramMetrics))
		if err != nil {
			t.Fatal(err)
		}
		for d := 1; d <= history; d++ {
			day := today.Add(-time.Duration(d) * 24 * time.Hour)
			for _, m := range sampleMetrics {
				v := float64(rng.IntN(5))
				samples = append(samples, []any{store.RollupDay, day, id, ids[m.Path], int64(8640), v * 8640, 0.0, v * 2, 86400.0, 0.0, 0.0})
			}
			for _, m := range histogramMetrics {
				s := shapes[rng.IntN(len(shapes))]
				hists = append(hists, []any{store.RollupDay, day, id, ids[m.Path], int64(s.count), s.sum, s.index, s.n})
			}
		}
	}
	if _, err := st.Pool().CopyFrom(ctx, pgx.Identifier{"rollup_samples"},
		[]string{"res", "ts", "node_id", "metric_id", "n", "sum", "min", "max", "ok_s", "warn_s", "crit_s"}, pgx.CopyFromRows(samples)); err != nil {
		t.Fatalf("copy sample rollups: %v", err)
	}
	if _, err := st.Pool().CopyFrom(ctx, pgx.Identifier{"rollup_histograms"},
		[]string{"res", "ts", "node_id", "metric_id", "count", "sum", "bucket_index", "bucket_count"}, pgx.CopyFromRows(hists)); err != nil {
		t.Fatalf("copy histogram rollups: %v", err)
	}
	if _, err := st.Pool().Exec(ctx, `ANALYZE rollup_samples; ANALYZE rollup_histograms`); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d nodes × %d days: %d sample and %d histogram day rollups in %v",
		customerNodes, history, len(samples), len(hists), time.Since(start).Round(time.Millisecond))
}

// client calls the collector's HTTP API as one caller.
type client struct {
	base, token string
	http        *http.Client
}

type answer struct {
	status     int
	retryAfter string
	code       string
	took       time.Duration
}

func (c client) get(ctx context.Context, path string) (answer, error) {
	return c.do(ctx, "GET", path, "")
}

func (c client) do(ctx context.Context, method, path, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), took: time.Since(start)}
	if resp.StatusCode >= 400 {
		var e httpjson.ErrorBody
		_ = json.Unmarshal(b, &e)
		a.code = e.Error.Code
	}
	if method == "POST" && resp.StatusCode == http.StatusCreated {
		var created struct{ Token string }
		if err := json.Unmarshal(b, &created); err != nil {
			return a, err
		}
		a.code = created.Token // the new secret, for the one caller who asks
	}
	return a, nil
}

// latencies collects durations and reports their percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// take returns the durations so far and starts over.
func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d
	l.d = nil
	slices.Sort(d)
	return d
}

// quantile is the nearest-rank quantile of sorted d.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[max(int(math.Ceil(q*float64(len(d))))-1, 0)]
}

// slotsHeld reads the collector's nbs_collector_read_slots_held.
func slotsHeld(c client) (int, error) {
	resp, err := c.http.Get(c.base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "nbs_collector_read_slots_held "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("/metrics has no nbs_collector_read_slots_held")
}

// fleetEnv, set to a collector's gRPC address, makes the test binary the
// fleet's process (runFleet) instead of running tests: agents are not in
// the collector's process, and the simulator's goroutines and garbage
// must not be counted as the collector's latency, nor the reports'
// garbage be collected on the simulator's time.
const fleetEnv = "NBS_TENANCY_FLEET"

// runFleet reports to the collector at addr until its stdin closes,
// printing "ready" once every node is registered and then a line
// "<unix ns of the ack> <latency ns>" per acknowledgement.
func runFleet(addr string) int {
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	fleet, err := loadgen.New(loadgen.Config{Addr: addr, Nodes: fleetNodes, Interval: fleetEvery, Troubled: 0.2,
		SnapshotEvery: time.Minute, Seed: 9, Log: slog.New(slog.DiscardHandler),
		OnAck: func(at time.Time, d time.Duration) {
			mu.Lock()
			fmt.Fprintf(out, "%d %d\n", at.UnixNano(), d.Nanoseconds())
			mu.Unlock()
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	go func() {
		for fleet.Stats().Registered < fleetNodes && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		fmt.Fprintln(out, "ready")
		mu.Unlock()
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			_ = out.Flush()
			mu.Unlock()
		}
	}()
	fleet.Run(ctx, nil, 0)
	mu.Lock()
	defer mu.Unlock()
	_ = out.Flush()
	return 0
}

// timed is one latency and when it was measured.
type timed struct {
	at time.Time
	d  time.Duration
}

// window is one phase of the run: reports running or not.
type window struct {
	load       bool
	start, end time.Time
}

// split sorts latencies into the baseline's and the load's by the window
// each was measured in; what fell between windows counts for neither.
func split(ts []timed, ws []window) (base, load []time.Duration) {
	for _, x := range ts {
		for _, w := range ws {
			if !x.at.Before(w.start) && x.at.Before(w.end) {
				if w.load {
					load = append(load, x.d)
				} else {
					base = append(base, x.d)
				}
				break
			}
		}
	}
	slices.Sort(base)
	slices.Sort(load)
	return base, load
}

// TestOneCustomersReportsSlowNobodyElse: while one customer's token runs
// 24 report loops of 399 days over its 30 nodes, the fleet's report→ack
// p99 stays within twice its baseline and an admin's whoami stays fast;
// past its slots the customer's next report is refused at once with 429
// and Retry-After, and another caller's is still admitted.
//
// The baseline and the load alternate in rounds (baseline first), so that
// whatever else the machine runs meanwhile weighs on both alike.
func TestOneCustomersReportsSlowNobodyElse(t *testing.T) {
	ctx := context.Background()
	dbURL := pgcluster.Database(t)
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, dbURL, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seed(t, st)

	// The collector as it ships: every limit at its default.
	cfg := collectorapp.DefaultConfig()
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	cfg.DBURL, cfg.GRPCAddr, cfg.HTTPAddr, cfg.Access.BootstrapAdminFile = dbURL, "127.0.0.1:0", "127.0.0.1:0", tokenFile
	perCaller := cfg.Reads.MaxPerCaller / api.ReportSlots // reports one caller may have in flight
	t.Logf("limits: --reads.pool-size %d, --reads.max-per-caller %d (%d reports), --reads.max-concurrent %d, --reads.statement-timeout %v",
		cfg.Reads.PoolSize, cfg.Reads.MaxPerCaller, perCaller, cfg.Reads.MaxConcurrent, cfg.Reads.StatementTimeout)
	col := collectorapp.New(cfg, log)
	runCtx, stopCollector := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- col.Run(runCtx) }()
	t.Cleanup(func() {
		stopCollector()
		if err := <-done; err != nil {
			t.Errorf("collector: %v", err)
		}
	})
	select {
	case <-col.Ready():
	case err := <-done:
		t.Fatalf("collector did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("collector not ready within 30s")
	}
	grpcAddr, httpAddr := col.Addrs()
	secret, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	admin := client{base: "http://" + httpAddr, token: strings.TrimSpace(string(secret)), http: hc}
	created, err := admin.do(ctx, "POST", "/api/v1/tokens", `{"name":"acme","role":"customer","selector":{"customer":"acme"}}`)
	if err != nil || created.status != http.StatusCreated {
		t.Fatalf("create the customer's token: %+v, %v", created, err)
	}
	customer := client{base: admin.base, token: created.code, http: hc}
	from := url.QueryEscape(time.Now().Add(-reportDays * 24 * time.Hour).UTC().Format(time.RFC3339))
	reportPath := "/api/v1/reports?from=" + from
	one, err := customer.get(ctx, reportPath)
	if err != nil || one.status != http.StatusOK {
		t.Fatalf("one report alone: %+v, %v", one, err)
	}
	t.Logf("one %d-day report of %d nodes alone: %v", reportDays, customerNodes, one.took.Round(time.Millisecond))

	// The fleet, in its own process: this test binary again.
	fleetCmd := exec.Command(os.Args[0], "-test.run=^$")
	fleetCmd.Env = append(os.Environ(), fleetEnv+"="+grpcAddr)
	fleetIn, err := fleetCmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fleetOut, err := fleetCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	fleetCmd.Stderr = os.Stderr
	if err := fleetCmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acksMu sync.Mutex
	var acks []timed
	ready := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(fleetOut)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				continue
			}
			var at, d int64
			if _, err := fmt.Sscan(sc.Text(), &at, &d); err == nil {
				acksMu.Lock()
				acks = append(acks, timed{time.Unix(0, at), time.Duration(d)})
				acksMu.Unlock()
			}
		}
	}()
	stopFleet := sync.OnceFunc(func() {
		fleetIn.Close()
		<-readDone
		if err := fleetCmd.Wait(); err != nil {
			t.Errorf("the fleet's process: %v", err)
		}
	})
	defer stopFleet()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the fleet did not register within 30s")
	}

	// An admin asks whoami every 100 ms throughout.
	var whoMu sync.Mutex
	var whos []timed
	var whoamiErrs atomic.Int64
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-probeCtx.Done():
				return
			case <-tick.C:
			}
			a, err := admin.get(probeCtx, "/api/v1/whoami")
			switch {
			case probeCtx.Err() != nil:
				return
			case err != nil || a.status != http.StatusOK:
				whoamiErrs.Add(1)
			default:
				whoMu.Lock()
				whos = append(whos, timed{time.Now(), a.took})
				whoMu.Unlock()
			}
		}
	}()
	defer func() { stopProbe(); <-probeDone }()
	time.Sleep(2 * time.Second) // past the registration burst

	// Rounds of baseline, then load: the customer's report loops. A
	// refused loop tries again after 100 ms, ignoring Retry-After, as an
	// impatient script would.
	var reports latencies
	var ok, refused, refusedWithoutRetry, other atomic.Int64
	var otherSeen sync.Map
	var windows []window
	for range rounds {
		b := window{start: time.Now()}
		time.Sleep(baselineFor)
		b.end = time.Now()
		l := window{load: true, start: b.end}
		loadCtx, stopLoad := context.WithTimeout(ctx, loadFor)
		var loops sync.WaitGroup
		for range reportLoops {
			loops.Go(func() {
				for loadCtx.Err() == nil {
					a, err := customer.get(loadCtx, reportPath)
					switch {
					case loadCtx.Err() != nil:
						return
					case err != nil:
						other.Add(1)
						otherSeen.Store(err.Error(), true)
					case a.status == http.StatusOK:
						ok.Add(1)
						reports.add(a.took)
					case a.status == http.StatusTooManyRequests && a.code == "too_many_requests":
						refused.Add(1)
						if a.retryAfter == "" {
							refusedWithoutRetry.Add(1)
						}
						time.Sleep(100 * time.Millisecond)
					default:
						other.Add(1)
						otherSeen.Store(fmt.Sprintf("HTTP %d %s", a.status, a.code), true)
					}
				}
			})
		}
		loops.Wait() // the window's end cancels what is in flight
		stopLoad()
		l.end = time.Now()
		windows = append(windows, b, l)
		time.Sleep(settle) // what the cancelled reports leave behind is no one's
	}
	stopFleet()
	stopProbe()
	<-probeDone
	acksMu.Lock()
	baseAck, loadAck := split(acks, windows)
	acksMu.Unlock()
	whoMu.Lock()
	baseWho, loadWho := split(whos, windows)
	whoMu.Unlock()
	done200 := reports.take()

	t.Logf("fleet of %d nodes at %v, in its own process; %d rounds of %v baseline then %v of %d report loops",
		fleetNodes, fleetEvery, rounds, baselineFor, loadFor, reportLoops)
	t.Logf("baseline: %d acks, ack p50 %v p99 %v max %v; whoami n=%d p50 %v p99 %v max %v",
		len(baseAck), quantile(baseAck, 0.5), quantile(baseAck, 0.99), quantile(baseAck, 1),
		len(baseWho), quantile(baseWho, 0.5), quantile(baseWho, 0.99), quantile(baseWho, 1))
	t.Logf("load:     %d acks, ack p50 %v p99 %v max %v; whoami n=%d p50 %v p99 %v max %v",
		len(loadAck), quantile(loadAck, 0.5), quantile(loadAck, 0.99), quantile(loadAck, 1),
		len(loadWho), quantile(loadWho, 0.5), quantile(loadWho, 0.99), quantile(loadWho, 1))
	t.Logf("reports: %d answered 200 (p50 %v, max %v), %d refused 429, %d other",
		ok.Load(), quantile(done200, 0.5), quantile(done200, 1), refused.Load(), other.Load())

	if other.Load() > 0 {
		otherSeen.Range(func(k, _ any) bool { t.Errorf("a report loop got %v", k); return true })
	}
	if ok.Load() == 0 || refused.Load() == 0 {
		t.Errorf("%d reports answered and %d refused: the load did not both run reports and meet the limit", ok.Load(), refused.Load())
	}
	if refusedWithoutRetry.Load() > 0 {
		t.Errorf("%d refusals without Retry-After", refusedWithoutRetry.Load())
	}
	if whoamiErrs.Load() > 0 {
		t.Errorf("%d whoami calls failed", whoamiErrs.Load())
	}
	if len(baseAck) < 100 || len(loadAck) < 100 {
		t.Fatalf("%d baseline and %d load acks: too few to measure", len(baseAck), len(loadAck))
	}
	if b, l := quantile(baseAck, 0.99), quantile(loadAck, 0.99); l > 2*b {
		t.Errorf("ack p99 under the reports %v is more than twice its baseline %v", l, b)
	}
	// whoami is a millisecond alone; "fast" is within twice that or under
	// 100 ms, which nobody waiting for a page notices (the 5.4 s of the
	// incident was a wait for the pool the reports held; what is left is
	// CPU on 2 cores).
	if b, l := quantile(baseWho, 0.99), quantile(loadWho, 0.99); l > 2*b && l > 100*time.Millisecond {
		t.Errorf("whoami p99 under the reports %v, baseline %v: more than twice, and over 100 ms", l, b)
	}

	// The (N+1)th: with the reads held up by a lock, the customer's N
	// reports stay in flight, holding their slots; one more is refused at
	// once, and another caller's is still admitted.
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE rollup_samples, rollup_histograms IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	held := make(chan answer, perCaller+1)
	for range perCaller {
		go func() {
			a, err := customer.get(ctx, reportPath)
			if err != nil {
				a.code = err.Error()
			}
			held <- a
		}()
	}
	waitSlots := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			n, err := slotsHeld(admin)
			if err != nil {
				t.Fatal(err)
			}
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d slots held, want %d", n, want)
			}
		}
	}
	waitSlots(perCaller * api.ReportSlots)
	extra, err := customer.get(ctx, reportPath)
	if err != nil {
		t.Fatal(err)
	}
	if extra.status != http.StatusTooManyRequests || extra.code != "too_many_requests" || extra.retryAfter == "" {
		t.Errorf("report %d of one caller in flight: %+v; want 429 too_many_requests with Retry-After", perCaller+1, extra)
	}
	if extra.took > time.Second {
		t.Errorf("the refusal took %v; it must not wait", extra.took)
	}
	go func() {
		a, err := admin.get(ctx, reportPath)
		if err != nil {
			a.code = err.Error()
		}
		held <- a
	}()
	waitSlots((perCaller + 1) * api.ReportSlots) // another caller's is admitted beside them
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range perCaller + 1 {
		if a := <-held; a.status != http.StatusOK {
			t.Errorf("a report held up by the lock: %+v, want 200 once it is gone", a)
		}
	}
	t.Logf("with %d reports of the customer in flight, report %d: HTTP %d %s, Retry-After %s, in %v",
		perCaller, perCaller+1, extra.status, extra.code, extra.retryAfter, extra.took.Round(time.Microsecond))
}
