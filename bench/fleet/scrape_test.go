package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/bench/loadgen"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// BenchmarkFleetScrape: what a Prometheus scraping the collector's export
// costs the ingest. A fleet of NBS_FLEET_SCRAPE_NODES (default 10000; 2000
// on a shared machine) at the default 10 s interval, as BenchmarkFleet
// holds it; once every node had a report acknowledged and two intervals
// more, four holds of NBS_FLEET_SCRAPE_HOLD (default 30s) alternate
// without and with a scrape of GET /api/v1/export/metrics each
// NBS_FLEET_SCRAPE_EVERY (default 1s, the case; Prometheus's own
// default is 1m), off on on off so that a trend in the machine's load
// cancels; report→ack p99 is taken over each hold, with the scrapes' time
// and size:
//
//	NBS_REQUIRE_PG=1 NBS_FLEET_SCRAPE_NODES=2000 go test -run '^$' -bench FleetScrape -benchtime 1x -timeout 30m ./bench/fleet/
func BenchmarkFleetScrape(b *testing.B) {
	bin := binary(b)
	nodes := envList("NBS_FLEET_SCRAPE_NODES", []int{10000})[0]
	hold := envDuration("NBS_FLEET_SCRAPE_HOLD", 30*time.Second)
	every := envDuration("NBS_FLEET_SCRAPE_EVERY", time.Second)
	const interval = 10 * time.Second
	for range b.N {
		dbURL := pgcluster.Database(b)
		token := viewerToken(b, bin, dbURL)
		c := startCollector(b, bin, dbURL, nodes)
		f, err := loadgen.New(loadgen.Config{Addr: c.GRPCAddr, Nodes: nodes, Interval: interval,
			Troubled: 0.05, Seed: uint64(nodes), NodesPerConn: nodesPerConn(nodes)})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan loadgen.Stats, 1)
		go func() { done <- f.Run(ctx, os.Stderr, interval) }()
		for f.Stats().AllRegistered == 0 {
			if ctx.Err() != nil {
				b.Fatal("the fleet stopped before it registered")
			}
			time.Sleep(time.Second)
		}
		time.Sleep(2 * interval)
		var p99 = map[bool][]time.Duration{}
		var scrapes []time.Duration
		var bytes, failed int
		for _, on := range []bool{false, true, true, false} {
			f.ResetLatency()
			var wg sync.WaitGroup
			stop := make(chan struct{})
			if on {
				wg.Add(1)
				go func() {
					defer wg.Done()
					took, size, errs := scrapeEvery(every, c.HTTPAddr, token, stop)
					scrapes, bytes, failed = append(scrapes, took...), max(bytes, size), failed+errs
				}()
			}
			time.Sleep(hold)
			close(stop)
			wg.Wait()
			s := f.Stats()
			p99[on] = append(p99[on], s.AckP99)
			fmt.Fprintf(os.Stderr, "hold with scrape=%v: ack p50 %v p99 %v; %v\n", on, s.AckP50, s.AckP99, s)
		}
		cancel()
		<-done
		slices.Sort(scrapes)
		mean := func(d []time.Duration) time.Duration { return (d[0] + d[1]) / 2 }
		off, with := mean(p99[false]), mean(p99[true])
		q := func(p float64) time.Duration { return scrapes[int(p*float64(len(scrapes)-1))] }
		b.Logf("%d nodes: ack p99 without a scrape %v (%v), with a scrape every %v %v (%v): %.2f×; %d scrapes, p50 %v p99 %v, %d bytes gzip, %d failed",
			nodes, off, p99[false], every, with, p99[true], float64(with)/float64(off), len(scrapes), q(0.5), q(0.99), bytes, failed)
		b.ReportMetric(float64(off)/1e6, "ack_p99_ms_without")
		b.ReportMetric(float64(with)/1e6, "ack_p99_ms_with_scrape")
		b.ReportMetric(float64(with)/float64(off), "ack_p99_ratio")
		b.ReportMetric(float64(q(0.5))/1e6, "scrape_p50_ms")
		b.ReportMetric(float64(q(0.99))/1e6, "scrape_p99_ms")
		b.ReportMetric(float64(bytes), "scrape_bytes")
		if failed > 0 {
			b.Errorf("%d scrapes failed", failed)
		}
	}
}

// viewerToken makes a viewer's API token with the binary's own command,
// as an operator makes Prometheus's.
func viewerToken(b *testing.B, bin, dbURL string) string {
	out, err := exec.Command(bin, "token", "create", "--db.url", dbURL, "--name", "prometheus", "--role", "viewer", "--expires", "1d").Output()
	if err != nil {
		b.Fatalf("nbs-collector token create: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// scrapeEvery GETs the export each period until stop, as Prometheus
// does (a scrape that takes longer delays the next, never overlaps it),
// and returns each scrape's time, the largest answer and the failures.
func scrapeEvery(period time.Duration, addr, token string, stop <-chan struct{}) ([]time.Duration, int, int) {
	var took []time.Duration
	size, failed := 0, 0
	tick := time.NewTicker(period)
	defer tick.Stop()
	client := &http.Client{Timeout: 30 * time.Second}
	for {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/export/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		// As Prometheus asks: the size is what crosses the network.
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err == nil {
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				took, size = append(took, time.Since(start)), max(size, int(n))
			} else {
				failed++
			}
		} else {
			failed++
		}
		select {
		case <-stop:
			return took, size, failed
		case <-tick.C:
		}
	}
}
