// Package remotewrite measures the collector's remote write path (encode
// and send, collector/export/remotewrite) in samples per second of CPU,
// beside Prometheus's own remote write of the same series in the same run:
// a Prometheus scraping the same series and remote-writing them, its CPU
// with remote write on less its CPU with it off, per sample sent. Both send
// to one real receiver, a second Prometheus (Debian's 2.x). About 2 min:
//
//	go test -run '^$' -bench RemoteWriteThroughput -benchtime 1x -v ./bench/remotewrite/
//
// BENCHMARKS.md ("Remote write: samples per second per core") has its
// figures.
package remotewrite

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/export/remotewrite"
)

const (
	nodes        = 1000
	perNode      = 20
	snapshots    = 30
	peerDuration = 30 * time.Second
)

// fleet is a snapshot shaped like the export: per node a few roots and
// breakdowns of the resets and drops families, gauges beside them.
func fleet(now time.Time, round int) export.Snapshot {
	lp := func(n, v string) *dto.LabelPair { return &dto.LabelPair{Name: proto.String(n), Value: proto.String(v)} }
	counter := &dto.MetricFamily{Name: proto.String("nbs_tcp_resets_total"), Help: proto.String("resets"), Type: dto.MetricType_COUNTER.Enum()}
	gauge := &dto.MetricFamily{Name: proto.String("nbs_ping_delay_seconds"), Help: proto.String("delay"), Type: dto.MetricType_GAUGE.Enum()}
	reasons := []string{"no_socket", "rst_ack", "syn_sent", "timeout", "closed", "listen_overflow", "bad_ack", "window"}
	for n := range nodes {
		base := []*dto.LabelPair{lp("node", fmt.Sprintf("node-%05d", n)), lp("tenant", fmt.Sprintf("tenant-%02d", n%20))}
		for i := range perNode {
			ls := append([]*dto.LabelPair{}, base...)
			if i < perNode/2 {
				ls = append(ls, lp("direction", []string{"sent", "received"}[i%2]), lp("reason", reasons[i%len(reasons)]+fmt.Sprint(i/len(reasons))))
				counter.Metric = append(counter.Metric, &dto.Metric{Label: ls, Counter: &dto.Counter{Value: proto.Float64(float64(round*(n+i)) + 1)}})
			} else {
				ls = append(ls, lp("target", fmt.Sprintf("node-%05d", (n+i)%nodes)))
				gauge.Metric = append(gauge.Metric, &dto.Metric{Label: ls, Gauge: &dto.Gauge{Value: proto.Float64(rand.Float64() / 1000)}})
			}
		}
	}
	return export.Snapshot{Now: now, Families: []*dto.MetricFamily{gauge, counter}}
}

func cpuSelf() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// prometheus runs Debian's Prometheus with cfg until the test ends.
func prometheus(t testing.TB, cfg string, receiver bool) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not found (apt-get install prometheus)")
	}
	dir, addr := t.TempDir(), freeAddr(t)
	if err := os.WriteFile(filepath.Join(dir, "p.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config.file=" + filepath.Join(dir, "p.yml"), "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--log.level=warn"}
	if receiver {
		args = append(args, "--web.enable-remote-write-receiver")
	}
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready: %s", out.String())
		}
	}
}

// selfMetric sums a metric of a Prometheus's own /metrics.
func selfMetric(t testing.TB, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, m := range fams[name].GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return sum
}

func BenchmarkRemoteWriteThroughput(b *testing.B) {
	for b.Loop() {
		throughput(b)
	}
}

func throughput(b *testing.B) {
	var t testing.TB = b
	recv := prometheus(t, "global: {scrape_interval: 1h}\n", true)
	ctx := context.Background()
	series := nodes * perNode

	// The collector's path: encode and send snapshots one after another
	// (remote write 1.0: Debian's Prometheus takes no 2.0).
	{
		s, err := remotewrite.New(export.Receiver{Name: "bench", URL: "http://" + recv + "/api/v1/write"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now().Add(-time.Duration(snapshots+1) * time.Second)
		snaps := make([]export.Snapshot, snapshots)
		for i := range snaps {
			snaps[i] = fleet(start.Add(time.Duration(i)*time.Second), i)
		}
		cpu0, wall0 := cpuSelf(), time.Now()
		for _, snap := range snaps {
			if err := s.Send(ctx, snap); err != nil {
				t.Fatal(err)
			}
		}
		cpu, wall := cpuSelf()-cpu0, time.Since(wall0)
		n := float64(series * snapshots)
		b.ReportMetric(n/cpu.Seconds(), "nbs-samples/cpu-s")
		t.Logf("NBS remote write 1.0: %d samples in %s wall, %s CPU: %.0f samples/s per core, %.0f samples/s wall",
			series*snapshots, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), n/cpu.Seconds(), n/wall.Seconds())
	}

	// Prometheus's: the same series scraped every second, with and
	// without a remote_write to the same receiver.
	var round atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		snap := fleet(time.Now(), int(round.Add(1)))
		w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
		enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range snap.Families {
			_ = enc.Encode(mf)
		}
	})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close() })
	scrape := fmt.Sprintf("global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n  - job_name: fleet\n    static_configs: [{targets: [%q]}]\n", lis.Addr().String())
	var cpuPerSample [2]float64
	for i, rw := range []bool{false, true} {
		cfg := scrape
		if rw {
			cfg += fmt.Sprintf("remote_write:\n  - url: http://%s/api/v1/write\n", recv)
		}
		p := prometheus(t, cfg, false)
		time.Sleep(5 * time.Second) // start-up and the first scrapes
		cpu0, scraped0, sent0 := selfMetric(t, p, "process_cpu_seconds_total"), selfMetric(t, p, "prometheus_tsdb_head_samples_appended_total"),
			selfMetric(t, p, "prometheus_remote_storage_samples_total")
		time.Sleep(peerDuration)
		cpu, scraped, sent := selfMetric(t, p, "process_cpu_seconds_total")-cpu0, selfMetric(t, p, "prometheus_tsdb_head_samples_appended_total")-scraped0,
			selfMetric(t, p, "prometheus_remote_storage_samples_total")-sent0
		cpuPerSample[i] = cpu / scraped
		t.Logf("Prometheus, remote write %v: %.0f samples scraped, %.0f sent in %s, %.2f s CPU (%.1f µs a scraped sample)",
			rw, scraped, sent, peerDuration, cpu, cpu/scraped*1e6)
		if rw && sent == 0 {
			t.Fatal("Prometheus sent nothing by remote write")
		}
	}
	extra := cpuPerSample[1] - cpuPerSample[0]
	t.Logf("Prometheus's remote write: %.2f µs CPU a sample, %.0f samples/s per core", extra*1e6, 1/extra)
	b.ReportMetric(1/extra, "prometheus-samples/cpu-s")
}
