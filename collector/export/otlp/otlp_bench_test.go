package otlp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelmetric "go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/nbs-project/nbs/collector/export"
)

// The benchmarks' fleet: nodes × perNode series, half counters by owner
// and reason, half latency quantiles by device — what a busy node's export
// holds.
const (
	benchNodes   = 100
	benchPerNode = 100
)

func benchSnapshot() export.Snapshot {
	cf := counterFam("nbs_drops_by_owner_packets_total")
	gf := gaugeFam("nbs_qdisc_latency_seconds")
	for n := range benchNodes {
		node := fmt.Sprintf("node-%03d", n)
		for i := range benchPerNode / 2 {
			cf.Metric = append(cf.Metric, cnt(float64(1000*i), "node", node, "owner", fmt.Sprintf("pod:shop.cart-%d", i), "reason", "NO_SOCKET", "tenant", "acme"))
			gf.Metric = append(gf.Metric, gau(0.001*float64(i), "device", fmt.Sprintf("veth%d", i), "node", node, "quantile", "0.99", "tenant", "acme"))
		}
	}
	return export.Snapshot{Now: time.Now(), Families: []*dto.MetricFamily{cf, gf}}
}

// sink takes OTLP requests and drops them: the benchmarks measure the
// sending side (build, encode, compress, HTTP), not a receiver's storage.
func sink(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(srv.Close)
	return srv.URL + "/v1/metrics"
}

// perSeries reports the time a series took, and the CPU time (this
// process's, every goroutine's and the sink's): on a shared machine the
// elapsed time is mostly waiting for a core.
func perSeries(b *testing.B, cpu0 time.Duration) {
	series := float64(b.N) * benchNodes * benchPerNode
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/series, "ns/series")
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/series, "cpu-ns/series")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConvert: a snapshot into OTLP metricdata, no sending.
func BenchmarkConvert(b *testing.B) {
	snap, n, st := benchSnapshot(), newNamer(), newStarts()
	cpu0 := cpuTime(b)
	for b.Loop() {
		convert(snap, n, st, "")
	}
	perSeries(b, cpu0)
}

// BenchmarkSend: a snapshot converted and exported, one request per node.
func BenchmarkSend(b *testing.B) {
	snap := benchSnapshot()
	s, err := NewWith(export.Receiver{Name: "bench", URL: sink(b)}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	cpu0 := cpuTime(b)
	for b.Loop() {
		if err := s.Send(context.Background(), snap); err != nil {
			b.Fatal(err)
		}
	}
	perSeries(b, cpu0)
}

// BenchmarkSDKInstruments is the peer: the same series as the SDK's own
// instruments (one MeterProvider per node, as each node is a Resource),
// collected by a manual reader and exported by the same exporter, 4 at a
// time like Send.
func BenchmarkSDKInstruments(b *testing.B) {
	url := sink(b)
	type node struct {
		reader *sdkmetric.ManualReader
	}
	nodes := make([]node, benchNodes)
	ctx := context.Background()
	for n := range nodes {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithResource(resource.NewWithAttributes(semconv.SchemaURL,
			semconv.ServiceName(ServiceName), semconv.HostName(fmt.Sprintf("node-%03d", n)))))
		m := mp.Meter(ScopeName)
		c, _ := m.Float64Counter("nbs_drops_by_owner_packets", otelmetric.WithUnit("{packet}"))
		g, _ := m.Float64Gauge("nbs_qdisc_latency", otelmetric.WithUnit("s"))
		for i := range benchPerNode / 2 {
			c.Add(ctx, float64(1000*i), otelmetric.WithAttributes(attribute.String("owner", fmt.Sprintf("pod:shop.cart-%d", i)), attribute.String("reason", "NO_SOCKET")))
			g.Record(ctx, 0.001*float64(i), otelmetric.WithAttributes(attribute.String("device", fmt.Sprintf("veth%d", i)), attribute.String("quantile", "0.99")))
		}
		nodes[n] = node{reader: r}
	}
	exps := make(chan *otlpmetrichttp.Exporter, defaultParallel)
	for range defaultParallel {
		e, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(url), otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression),
			otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}))
		if err != nil {
			b.Fatal(err)
		}
		exps <- e
	}
	cpu0 := cpuTime(b)
	for b.Loop() {
		work := make(chan node)
		done := make(chan error, defaultParallel)
		for range defaultParallel {
			go func() {
				var err error
				for nd := range work {
					if err != nil {
						continue // drain, so the sender does not block
					}
					var rm metricdata.ResourceMetrics
					if err = nd.reader.Collect(ctx, &rm); err != nil {
						continue
					}
					e := <-exps
					err = e.Export(ctx, &rm)
					exps <- e
				}
				done <- err
			}()
		}
		for _, nd := range nodes {
			work <- nd
		}
		close(work)
		for range defaultParallel {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	perSeries(b, cpu0)
}
