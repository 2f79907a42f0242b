package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// BenchmarkExport measures the Prometheus scrape of a 10,000-node fleet
// (NBS_API_EXPORT_NODES) — GET /export/metrics, its time and bytes, plain
// and gzip as Prometheus asks — beside the fleet page (GET /fleet) and
// every node with its roots (GET /nodes) of the same fleet, and a SELECT 1
// anchor, in the same run:
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench Export -benchtime 1x -timeout 60m ./bench/api/
//
// The fleet is BenchmarkFleet's: every node registered with the busy tree
// (185 metrics), a snapshot of its whole tree and then a usual report
// (roots; a troubled node's tcp_reset branch raised, every 20th), so the
// export holds every node's roots, the troubled nodes' raised children
// and every counter that moved within the window.
func BenchmarkExport(b *testing.B) {
	ctx := context.Background()
	n := envInt(b, "NBS_API_EXPORT_NODES", 10000)
	st, err := store.Open(ctx, pgcluster.Database(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	// The export holds what reported within its window (5 minutes): the
	// reports are of the last minute.
	now := time.Now().Truncate(time.Second)
	start := time.Now()
	f, err := register(ctx, st, seedConfig{Nodes: n}, now)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("registered %d nodes in %s", n, time.Since(start).Round(time.Second))
	start = time.Now()
	for k, snapshot := range []bool{true, false} {
		if _, _, err := f.writeRound(ctx, st, now.Add(time.Duration(k-3)*interval), snapshot); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := st.Pool().Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote a snapshot and a report of every node in %s", time.Since(start).Round(time.Second))

	srv, token := server(b, st)
	// Its own transport: Go's would ask for gzip and unpack it unseen.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var bytesOf = map[string]int{}
	var seriesOf = map[string]int{}
	get := func(name, path, encoding string) func() error {
		return func() error {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/v1"+path, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			if encoding != "" {
				req.Header.Set("Accept-Encoding", encoding)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %d %.300s", path, resp.StatusCode, body)
			}
			if got := resp.Header.Get("Content-Encoding"); got != encoding {
				return fmt.Errorf("GET %s: Content-Encoding %q, want %q", path, got, encoding)
			}
			bytesOf[name] = len(body)
			if strings.HasPrefix(path, "/export/") && encoding == "" {
				seriesOf[name] = countSeries(body)
			}
			return nil
		}
	}
	report := func(name string, t timings) {
		b.ReportMetric(ms(t.q(0.5)), name+"-p50-ms")
		b.ReportMetric(ms(t.q(0.99)), name+"-p99-ms")
		if bytesOf[name] > 0 {
			b.ReportMetric(float64(bytesOf[name]), name+"-bytes")
		}
		b.Logf("%-28s p50 %8.2f ms  p99 %8.2f ms  (%d requests) %10d bytes", name, ms(t.q(0.5)), ms(t.q(0.99)), len(t), bytesOf[name])
	}
	b.ResetTimer()
	report("anchor-select-1", run(b, 200, func() error {
		var one int
		return st.Pool().QueryRow(ctx, `SELECT 1`).Scan(&one)
	}))
	// The export's parts: the store's read (PostgreSQL), then the families
	// built from it (Gather, which reads too), then the text written.
	report("export-store-read", run(b, 10, func() error {
		_, err := st.ExportNodes(ctx, store.All{}, time.Now().Add(-5*time.Minute))
		return err
	}))
	exp := export.New(st, export.DefaultConfig())
	report("export-gather", run(b, 10, func() error {
		_, err := exp.Gather(ctx, store.All{})
		return err
	}))
	report("export", run(b, 20, get("export", "/export/metrics", "")))
	report("export-gzip", run(b, 20, get("export-gzip", "/export/metrics", "gzip")))
	report("fleet-page", run(b, 20, get("fleet-page", "/fleet", "")))
	report("nodes-every-node-with-roots", run(b, 10, get("nodes-every-node-with-roots", "/nodes", "")))
	b.ReportMetric(float64(seriesOf["export"]), "export-series")
	b.Logf("the export of %d nodes: %d series, %.1f a node, %d bytes (%d gzip)", n, seriesOf["export"],
		float64(seriesOf["export"])/float64(n), bytesOf["export"], bytesOf["export-gzip"])
	if seriesOf["export"] < 3*n {
		b.Errorf("the export holds %d series for %d nodes: fewer than each node's info, last report and a root", seriesOf["export"], n)
	}
}

// countSeries counts the samples of a Prometheus text exposition.
func countSeries(body []byte) int {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}
