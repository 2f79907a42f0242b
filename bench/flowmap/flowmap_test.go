// Package flowmap measures the flow map's collector side (issue 29): flow
// edges ingested per second through store.WriteReports, the collector's
// write path, and GET /api/v1/flows answered by collector/flows over
// 5,000 owners and 50,000 edges:
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench FlowMap -benchtime 1x -timeout 30m ./bench/flowmap/
//
// The fleet: NBS_FLOWMAP_NODES (100) nodes of one tenant, 50 pod owners
// each, every owner holding an address and connecting to 10 owners of
// other nodes on port 8080; each node reports, every minute of
// NBS_FLOWMAP_MINUTES (5), the client ends of its owners' connections and
// the server ends of the connections to them (1,000 edges a report, every
// one with an RTT histogram, every 10th with resets), and its holders: the
// map has 5,000 owners and 50,000 edges, each seen by both ends. Reports
// are written ten nodes at a time, as the ingest writer batches them, by
// one writer (one core of Go, one PostgreSQL backend). The map is then
// asked NBS_FLOWMAP_READS (30) times for the last hour (the page's
// default: hour buckets) and for the last 5 minutes (minute buckets), 500
// edges a page (the default), worst first: cold (a new service each time)
// and warm (the window's graph kept, as the next page reads it); and once
// with limit 5000. NBS_FLOWMAP_UNANALYZED=1 reads on tables never analyzed
// (a fresh install's first minutes; the plans must not depend on them).
package flowmap

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/flows"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// explainReads logs EXPLAIN (ANALYZE, BUFFERS) of the edges' read of a
// first map of the last hour and of the last 5 minutes
// (NBS_FLOWMAP_EXPLAIN=1).
func explainReads(b *testing.B, st *store.Store, ids []int32, at time.Time) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		w    flows.Window
	}{
		{"1h", mustWindow(b, "1h", at)},
		{"5m", mustWindow(b, "5m", at)},
	} {
		read := store.FlowRead{Nodes: ids, Sources: store.FlowSources(c.w.From, c.w.To)}
		edges, err := st.ReadFlowEdges(ctx, read)
		if err != nil {
			b.Fatal(err)
		}
		// A page's RTT: the histograms of 1,000 of the node's edges.
		var keys []store.FlowRowKey
		for e := range edges.All() {
			if len(keys) == 1000 {
				break
			}
			keys = append(keys, e.Key())
		}
		sql, args := store.FlowEdgesSQL(read)
		explain(b, st, c.name+", its edges", sql, args)
		sql, args = store.FlowRTTSQL(read.Sources, keys)
		explain(b, st, c.name+", a page's RTT", sql, args)
	}
}

func explain(b *testing.B, st *store.Store, what, sql string, args []any) {
	rows, err := st.Pool().Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	// Printed, not logged: the testing package truncates a benchmark's log.
	fmt.Fprintf(os.Stderr, "EXPLAIN a map of %s:\n%s\n", what, strings.Join(plan, "\n"))
}

func mustWindow(b *testing.B, window string, at time.Time) flows.Window {
	w, err := flows.ParseWindow(url.Values{"window": {window}}, at)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

func BenchmarkFlowMap(b *testing.B) {
	nodes, minutes, reads := envInt("NBS_FLOWMAP_NODES", 100), envInt("NBS_FLOWMAP_MINUTES", 5), envInt("NBS_FLOWMAP_READS", 30)
	const owners, fanout = 50, 10
	ctx := context.Background()
	st := storetest.Open(b)
	ids := benchFleet(ctx, b, st, nodes)
	// NBS_FLOWMAP_UNANALYZED=1 reads on tables never analyzed, as a fresh
	// install's first minute does (autovacuum kept off them).
	unanalyzed := os.Getenv("NBS_FLOWMAP_UNANALYZED") != ""
	if unanalyzed {
		if _, err := st.Pool().Exec(ctx, `ALTER TABLE flow_edges SET (autovacuum_enabled = false); ALTER TABLE flow_holders SET (autovacuum_enabled = false)`); err != nil {
			b.Fatal(err)
		}
	}
	total := nodes * owners
	owner, addr := benchOwner, benchAddr
	// Owner g connects to g + k·owners·7 + 1 (k < fanout): always another node.
	peerOf := func(g, k int) int { return (g + (k+1)*owners*7 + 1) % total }
	edgesOf := make([][]store.FlowEdge, nodes)
	counters := func(i int) store.FlowCounters {
		c := store.FlowCounters{Opened: 5, Closed: 5, BytesSent: 40000, BytesRecv: 900000, Retransmits: uint64(i % 3),
			RTT: map[int32]uint64{300: 3, 310: 1, 330: 1}}
		if i%10 == 0 {
			c.ResetsSent = map[string]uint64{"no_socket": 1}
		}
		return c
	}
	for g := range total {
		n := g / owners
		for k := range fanout {
			p := peerOf(g, k)
			edgesOf[n] = append(edgesOf[n], store.FlowEdge{Local: owner(g), Role: store.FlowClient, LocalAddr: addr(g), PeerAddr: addr(p), PeerPort: 8080, FlowCounters: counters(g + k)})
			edgesOf[p/owners] = append(edgesOf[p/owners], store.FlowEdge{Local: owner(p), Role: store.FlowServer, LocalAddr: addr(p), LocalPort: 8080, PeerAddr: addr(g), FlowCounters: counters(g + k)})
		}
	}
	now := time.Now().UTC().Truncate(time.Minute)
	t0 := now.Add(-time.Duration(minutes) * time.Minute)
	var written, batches int
	var wall, cpu time.Duration
	var lat []time.Duration
	for m := range minutes {
		for n0 := 0; n0 < nodes; n0 += 10 {
			var batch []store.Report
			for n := n0; n < min(n0+10, nodes); n++ {
				r := store.Report{NodeID: ids[n], InstanceID: 1, Seq: uint64(m + 1), Time: t0.Add(time.Duration(m)*time.Minute + 30*time.Second), IntervalMS: 60000, Flows: edgesOf[n]}
				for o := n * owners; o < (n+1)*owners; o++ {
					r.Holders = append(r.Holders, store.AddressHolder{Address: addr(o), Owner: owner(o)})
				}
				batch = append(batch, r)
				written += len(r.Flows)
			}
			start, c0 := time.Now(), cpuTime()
			if _, err := st.WriteReports(ctx, batch); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			wall += d
			cpu += cpuTime() - c0
			lat = append(lat, d)
			batches++
		}
	}
	// The anchor, in the same run: the same reports (another instance's)
	// without their flows and holders, through the same write path.
	var bare time.Duration
	for m := range minutes {
		for n0 := 0; n0 < nodes; n0 += 10 {
			var batch []store.Report
			for n := n0; n < min(n0+10, nodes); n++ {
				batch = append(batch, store.Report{NodeID: ids[n], InstanceID: 2, Seq: uint64(m + 1), Time: t0.Add(time.Duration(m)*time.Minute + 30*time.Second), IntervalMS: 60000})
			}
			start := time.Now()
			if _, err := st.WriteReports(ctx, batch); err != nil {
				b.Fatal(err)
			}
			bare += time.Since(start)
		}
	}
	b.Logf("anchor: the same %d reports without flows in %s wall", batches*10, bare.Round(time.Millisecond))
	slices.Sort(lat)
	b.ReportMetric(float64(written)/wall.Seconds(), "edges_ingested/s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "batch_p50_ms")
	b.ReportMetric(float64(written)/cpu.Seconds(), "edges/go_cpu_s")
	b.Logf("ingest: %d edges in %d batches of 10 reports (%d edges each report) in %s wall, %s Go CPU", written, batches, len(edgesOf[0]), wall.Round(time.Millisecond), cpu.Round(time.Millisecond))

	svc := flows.New(st, slog.New(slog.DiscardHandler))
	var answer struct {
		TotalEdges int `json:"total_edges"`
		Edges      []struct {
			SeenBy []string `json:"seen_by"`
		} `json:"edges"`
	}
	ask := func(svc *flows.Service, q string) (time.Duration, int) {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/flows?"+q, nil)
		req = req.WithContext(access.WithPrincipal(req.Context(), access.Principal{Name: "op", Role: access.RoleViewer}))
		w := httptest.NewRecorder()
		start := time.Now()
		svc.ListFlows(w, req)
		d := time.Since(start)
		if w.Code != http.StatusOK {
			b.Fatalf("GET /flows?%s: %d %s", q, w.Code, w.Body.String())
		}
		if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || answer.TotalEdges != total*fanout || len(answer.Edges[0].SeenBy) != 2 {
			b.Fatalf("GET /flows?%s: %d edges (%v), want %d seen by both ends", q, answer.TotalEdges, err, total*fanout)
		}
		return d, w.Body.Len()
	}
	at := now.Add(-time.Second).Format(time.RFC3339)
	// Reads run on the statistics autovacuum keeps (it analyzes a table
	// within a minute of its first rows): on none, the planner took
	// the (res, ts) index for the page's RTT lookups at 20 nodes and
	// read a bucket's every row per edge, 5 s a read.
	if unanalyzed {
		b.Logf("reads on tables never analyzed")
	} else if _, err := st.Pool().Exec(ctx, `ANALYZE flow_edges, flow_holders`); err != nil {
		b.Fatal(err)
	}
	if os.Getenv("NBS_FLOWMAP_EXPLAIN") != "" {
		explainReads(b, st, ids, now.Add(-time.Second))
	}
	var total50 int
	for b.Loop() {
		for _, c := range []struct{ name, q string }{
			{"1h", "window=1h&at=" + at}, // the page's default: the hour buckets
			{"5m", "window=5m&at=" + at}, // the minute buckets
		} {
			// Cold: a new service, nothing kept; warm: the graph of the
			// window kept (15 s), as the next page or another sort reads it.
			// Go's CPU of a cold read beside its wall time: on a machine
			// shared with other work the wall time measures the load as
			// much as the read (PostgreSQL's part is not in it).
			var cold, warm, coldCPU []time.Duration
			var size int
			for range reads {
				c0 := cpuTime()
				d, _ := ask(flows.New(st, slog.New(slog.DiscardHandler)), c.q)
				coldCPU = append(coldCPU, cpuTime()-c0)
				cold = append(cold, d)
			}
			ask(svc, c.q) // builds and keeps the window's graph
			for range reads {
				d, n := ask(svc, c.q)
				warm = append(warm, d)
				size = n
			}
			slices.Sort(cold)
			slices.Sort(warm)
			slices.Sort(coldCPU)
			dAll, nAll := ask(flows.New(st, slog.New(slog.DiscardHandler)), c.q+"&limit=5000")
			p := func(ds []time.Duration, q int) time.Duration { return ds[min(len(ds)-1, len(ds)*q/100)] }
			b.ReportMetric(float64(p(cold, 50).Microseconds())/1000, "map_"+c.name+"_cold_p50_ms")
			b.ReportMetric(float64(p(cold, 99).Microseconds())/1000, "map_"+c.name+"_cold_p99_ms")
			b.ReportMetric(float64(p(warm, 99).Microseconds())/1000, "map_"+c.name+"_warm_p99_ms")
			b.ReportMetric(float64(p(coldCPU, 50).Microseconds())/1000, "map_"+c.name+"_cold_go_cpu_p50_ms")
			b.Logf("map %s, 500 edges (%d KiB): cold p50 %s p99 %s (Go CPU p50 %s); warm p50 %s p99 %s; 5000 edges cold (%d KiB) %s",
				c.name, size>>10, p(cold, 50), p(cold, 99), p(coldCPU, 50), p(warm, 50), p(warm, 99), nAll>>10, dAll)
		}
		total50++
	}
	_ = total50
}

// benchFleet stores the benchmarks' nodes (node-000…, tenant acme).
func benchFleet(ctx context.Context, b *testing.B, st *store.Store, nodes int) []int32 {
	ids := make([]int32, nodes)
	for i := range ids {
		id, err := st.UpsertNode(ctx, store.Node{Name: fmt.Sprintf("node-%03d", i), Labels: map[string]string{"customer": "acme"}, Tenant: "acme", InstanceID: 1, IntervalMS: 60000})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// benchOwner is owner g of the benchmarks' fleet, a pod; benchAddr its
// address.
func benchOwner(g int) store.FlowOwner {
	return store.FlowOwner{ID: fmt.Sprintf("pod:shop.app-%d", g), Kind: "pod", Name: fmt.Sprintf("shop/app-%d", g), Workload: fmt.Sprintf("shop/app%d", g%97)}
}

func benchAddr(g int) string { return fmt.Sprintf("10.%d.%d.%d", g>>16&255, g>>8&255, g&255) }
