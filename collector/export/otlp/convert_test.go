package otlp

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/internal/promfamily"
)

// Every family the export can hold comes back from Prometheus's OTLP
// translation (otlptranslator, the code Prometheus 3 runs) under the
// scrape's name, with its unit in the unit field where a suffix names one.
func TestNamesRoundTripEveryFamily(t *testing.T) {
	want := map[string]naming{
		"nbs_tcp_resets_total":                   {"nbs_tcp_resets", "{reset}"},
		"nbs_device_drops_packets_total":         {"nbs_device_drops_packets", "{packet}"},
		"nbs_tx_latency_seconds":                 {"nbs_tx_latency", "s"},
		"nbs_ping_loss_ratio":                    {"nbs_ping_loss", "1"},
		"nbs_conntrack_usage_ratio":              {"nbs_conntrack_usage", "1"},
		"nbs_agent_bpf_runs_per_second":          {"nbs_agent_bpf_runs", "{run}/s"},
		"nbs_agent_bpf_run_seconds":              {"nbs_agent_bpf_run", "s"},
		"nbs_node_last_report_timestamp_seconds": {"nbs_node_last_report_timestamp", "s"},
		"nbs_conntrack_entries":                  {"nbs_conntrack_entries", "{entry}"},
		"nbs_ping_clock_synced":                  {"nbs_ping_clock_synced", ""},
		"nbs_tcp_rto_total":                      {"nbs_tcp_rto", ""},
		"nbs_tree_increase_total":                {"nbs_tree_increase", ""},
		"nbs_node_info":                          {"nbs_node_info", ""},
	}
	n := newNamer()
	fams := export.New(nil, export.DefaultConfig()).Families()
	if len(fams) < 50 {
		t.Fatalf("only %d families: the list is not the export's", len(fams))
	}
	for _, f := range fams {
		counter := f.Type == promfamily.Counter
		got := n.name(f.Name, counter)
		if w, ok := want[f.Name]; ok && got != w {
			t.Errorf("%s: got %+v, want %+v", f.Name, got, w)
		}
		delete(want, f.Name)
		if counter && strings.HasSuffix(got.name, "_total") {
			t.Errorf("%s: OTLP name %q keeps _total", f.Name, got.name)
		}
		if strings.HasSuffix(f.Name, "_seconds") && got.unit != "s" {
			t.Errorf("%s: unit %q, want s", f.Name, got.unit)
		}
		var mt otlptranslator.MetricType = otlptranslator.MetricTypeGauge
		if counter {
			mt = otlptranslator.MetricTypeMonotonicCounter
		}
		for _, s := range []otlptranslator.TranslationStrategyOption{otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.NoUTF8EscapingWithSuffixes} {
			mn := otlptranslator.NewMetricNamer("", s)
			back, err := mn.Build(otlptranslator.Metric{Name: got.name, Unit: got.unit, Type: mt})
			if err != nil || back != f.Name {
				t.Errorf("%s: OTLP %+v comes back as %q (%v) under %s", f.Name, got, back, err, s)
			}
		}
	}
	for name := range want {
		t.Errorf("family %s is not in the export's list", name)
	}
}

// A name the split would not bring back goes unsplit.
func TestNamesThatWouldNotRoundTripStayWhole(t *testing.T) {
	for _, tc := range []struct {
		prom    string
		counter bool
		want    naming
	}{
		// _ratio of a counter: Prometheus adds _ratio only to gauges.
		{"nbs_x_ratio_total", true, naming{"nbs_x_ratio", ""}},
		// "seconds" in the middle: splitting would move it to the end.
		{"nbs_x_seconds_spent", false, naming{"nbs_x_seconds_spent", ""}},
		{"nbs_x_seconds_total", true, naming{"nbs_x", "s"}},
	} {
		if got := newNamer().name(tc.prom, tc.counter); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.prom, got, tc.want)
		}
	}
}

func lp(kv ...string) []*dto.LabelPair {
	var out []*dto.LabelPair
	for i := 0; i < len(kv); i += 2 {
		out = append(out, &dto.LabelPair{Name: proto.String(kv[i]), Value: proto.String(kv[i+1])})
	}
	return out
}

func counterFam(name string, ms ...*dto.Metric) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(name + " help"), Type: dto.MetricType_COUNTER.Enum(), Metric: ms}
}

func gaugeFam(name string, ms ...*dto.Metric) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(name + " help"), Type: dto.MetricType_GAUGE.Enum(), Metric: ms}
}

func cnt(v float64, labels ...string) *dto.Metric {
	return &dto.Metric{Label: lp(labels...), Counter: &dto.Counter{Value: proto.Float64(v)}}
}

func gau(v float64, labels ...string) *dto.Metric {
	return &dto.Metric{Label: lp(labels...), Gauge: &dto.Gauge{Value: proto.Float64(v)}}
}

func TestConvert(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	born := now.Add(-time.Hour)
	created := cnt(7, "direction", "sent", "node", "a", "reason", "no_socket", "tenant", "acme")
	created.Counter.CreatedTimestamp = timestamppb.New(born)
	snap := export.Snapshot{Now: now, Families: []*dto.MetricFamily{
		counterFam("nbs_drops_by_owner_packets_total",
			cnt(3, "node", "a", "owner", "pod:shop.cart-7d9f", "reason", "NO_SOCKET", "tenant", "acme"),
			cnt(4, "node", "a", "owner", "pod:0b5e9c1e-uid", "reason", "NO_SOCKET", "tenant", "acme"),
			cnt(5, "node", "a", "owner", "container:3f2a1b2c3d4e", "reason", "NO_SOCKET", "tenant", "acme"),
			cnt(6, "node", "a", "owner", "pod:"+strings.Repeat("n", 90)+".x", "reason", "NO_SOCKET", "tenant", "acme"),
			cnt(1, "node", "a", "owner", "other", "reason", "NO_SOCKET", "tenant", "acme")),
		gaugeFam("nbs_node_info",
			gau(1, "agent_version", "v1.2.3", "kernel_release", "6.12", "node", "a", "tenant", "acme"),
			gau(1, "agent_version", "v1.2.4", "kernel_release", "6.1", "node", "b")),
		gaugeFam("nbs_ping_rtt_seconds",
			gau(0.002, "node", "b", "quantile", "0.99", "target", "10.0.0.7"),
			gau(0.003, "node", "b", "quantile", "0.99", "target", "peer-c")),
		gaugeFam("nbs_qdisc_latency_seconds", gau(0.0001, "device", "eth0", "node", "b", "quantile", "0.99")),
		gaugeFam("nbs_rx_latency_seconds", gau(0.0002, "node", "b", "protocol", "udp", "quantile", "0.99", "stage", "stack")),
		counterFam("nbs_tcp_resets_total", created),
	}}
	st := newStarts()
	got := convert(snap, newNamer(), st, "v9")

	scope := instrumentation.Scope{Name: ScopeName, Version: "v9"}
	s := attribute.String
	want := []*metricdata.ResourceMetrics{
		{
			Resource: resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("nbs-agent"), semconv.ServiceInstanceID("a"), semconv.HostName("a"),
				semconv.ServiceVersion("v1.2.3"), s("nbs.tenant", "acme")),
			ScopeMetrics: []metricdata.ScopeMetrics{{Scope: scope, Metrics: []metricdata.Metrics{
				{Name: "nbs_drops_by_owner_packets", Description: "nbs_drops_by_owner_packets_total help", Unit: "{packet}", Data: metricdata.Sum[float64]{
					Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: []metricdata.DataPoint[float64]{
						{Attributes: attribute.NewSet(s("owner", "pod:shop.cart-7d9f"), s("k8s.namespace.name", "shop"), s("k8s.pod.name", "cart-7d9f"), s("reason", "NO_SOCKET")), StartTime: now, Time: now, Value: 3},
						{Attributes: attribute.NewSet(s("owner", "pod:0b5e9c1e-uid"), s("k8s.pod.uid", "0b5e9c1e-uid"), s("reason", "NO_SOCKET")), StartTime: now, Time: now, Value: 4},
						{Attributes: attribute.NewSet(s("owner", "container:3f2a1b2c3d4e"), s("container.id", "3f2a1b2c3d4e"), s("reason", "NO_SOCKET")), StartTime: now, Time: now, Value: 5},
						// Cut by the agent: its name is not all there.
						{Attributes: attribute.NewSet(s("owner", "pod:"+strings.Repeat("n", 90)+".x"), s("reason", "NO_SOCKET")), StartTime: now, Time: now, Value: 6},
						{Attributes: attribute.NewSet(s("owner", "other"), s("reason", "NO_SOCKET")), StartTime: now, Time: now, Value: 1},
					}}},
				{Name: "nbs_node_info", Description: "nbs_node_info help", Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
					{Attributes: attribute.NewSet(s("agent_version", "v1.2.3"), s("kernel_release", "6.12")), Time: now, Value: 1}}}},
				{Name: "nbs_tcp_resets", Description: "nbs_tcp_resets_total help", Unit: "{reset}", Data: metricdata.Sum[float64]{
					Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: []metricdata.DataPoint[float64]{
						{Attributes: attribute.NewSet(s("direction", "sent"), s("reason", "no_socket")), StartTime: born, Time: now, Value: 7}}}},
			}}},
		},
		{
			Resource: resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("nbs-agent"), semconv.ServiceInstanceID("b"), semconv.HostName("b"), semconv.ServiceVersion("v1.2.4")),
			ScopeMetrics: []metricdata.ScopeMetrics{{Scope: scope, Metrics: []metricdata.Metrics{
				{Name: "nbs_node_info", Description: "nbs_node_info help", Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
					{Attributes: attribute.NewSet(s("agent_version", "v1.2.4"), s("kernel_release", "6.1")), Time: now, Value: 1}}}},
				{Name: "nbs_ping_rtt", Description: "nbs_ping_rtt_seconds help", Unit: "s", Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
					{Attributes: attribute.NewSet(s("quantile", "0.99"), s("target", "10.0.0.7"), s("network.peer.address", "10.0.0.7")), Time: now, Value: 0.002},
					{Attributes: attribute.NewSet(s("quantile", "0.99"), s("target", "peer-c")), Time: now, Value: 0.003}}}},
				{Name: "nbs_qdisc_latency", Description: "nbs_qdisc_latency_seconds help", Unit: "s", Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
					{Attributes: attribute.NewSet(s("device", "eth0"), s("network.interface.name", "eth0"), s("quantile", "0.99")), Time: now, Value: 0.0001}}}},
				{Name: "nbs_rx_latency", Description: "nbs_rx_latency_seconds help", Unit: "s", Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
					{Attributes: attribute.NewSet(s("protocol", "udp"), s("network.transport", "udp"), s("quantile", "0.99"), s("stage", "stack")), Time: now, Value: 0.0002}}}},
			}}},
		},
	}
	if len(got) != len(want) {
		t.Fatalf("%d resources, want %d", len(got), len(want))
	}
	for i := range want {
		metricdatatest.AssertEqual(t, *want[i], *got[i])
	}
}

// A counter without a created timestamp starts when this sender first saw
// it and keeps that start while it is in every snapshot; one that left a
// snapshot starts anew.
func TestCounterStartStaysWhileTheSeriesGoesOn(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	snapAt := func(at time.Time, nodes ...string) export.Snapshot {
		f := counterFam("nbs_tcp_rto_total")
		for _, n := range nodes {
			f.Metric = append(f.Metric, cnt(1, "node", n))
		}
		return export.Snapshot{Now: at, Families: []*dto.MetricFamily{f}}
	}
	startOf := func(rms []*metricdata.ResourceMetrics, node string) time.Time {
		for _, rm := range rms {
			if nodeOf(rm) == node {
				return rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Sum[float64]).DataPoints[0].StartTime
			}
		}
		t.Fatalf("node %s not converted", node)
		return time.Time{}
	}
	st, n := newStarts(), newNamer()
	for _, step := range []struct {
		at    time.Duration
		nodes []string
		want  map[string]time.Duration
	}{
		{0, []string{"a", "b"}, map[string]time.Duration{"a": 0, "b": 0}},
		{15 * time.Second, []string{"a"}, map[string]time.Duration{"a": 0}},
		{30 * time.Second, []string{"a", "b"}, map[string]time.Duration{"a": 0, "b": 30 * time.Second}},
		{45 * time.Second, []string{"a", "b"}, map[string]time.Duration{"a": 0, "b": 30 * time.Second}},
	} {
		rms := convert(snapAt(t0.Add(step.at), step.nodes...), n, st, "")
		for node, w := range step.want {
			if got := startOf(rms, node); !got.Equal(t0.Add(w)) {
				t.Errorf("at +%s node %s: start %s, want +%s", step.at, node, got.Sub(t0), w)
			}
		}
	}
}

func TestHalve(t *testing.T) {
	dps := func(n int) []metricdata.DataPoint[float64] {
		var out []metricdata.DataPoint[float64]
		for i := range n {
			out = append(out, metricdata.DataPoint[float64]{Value: float64(i)})
		}
		return out
	}
	rm := func(ms ...metricdata.Metrics) *metricdata.ResourceMetrics {
		return &metricdata.ResourceMetrics{ScopeMetrics: []metricdata.ScopeMetrics{{Metrics: ms}}}
	}
	count := func(r *metricdata.ResourceMetrics) (metrics, points int) {
		for _, m := range r.ScopeMetrics[0].Metrics {
			metrics++
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				points += len(d.DataPoints)
			case metricdata.Gauge[float64]:
				points += len(d.DataPoints)
			}
		}
		return metrics, points
	}
	for _, tc := range []struct {
		name   string
		in     *metricdata.ResourceMetrics
		ok     bool
		ma, mb int // metrics in each half
		pa, pb int // data points in each half
	}{
		{"metrics", rm(metricdata.Metrics{Name: "x", Data: metricdata.Gauge[float64]{DataPoints: dps(3)}}, metricdata.Metrics{Name: "y", Data: metricdata.Sum[float64]{DataPoints: dps(1)}}, metricdata.Metrics{Name: "z", Data: metricdata.Gauge[float64]{DataPoints: dps(2)}}), true, 1, 2, 3, 3},
		{"points of a sum", rm(metricdata.Metrics{Name: "x", Data: metricdata.Sum[float64]{DataPoints: dps(5)}}), true, 1, 1, 2, 3},
		{"points of a gauge", rm(metricdata.Metrics{Name: "x", Data: metricdata.Gauge[float64]{DataPoints: dps(2)}}), true, 1, 1, 1, 1},
		{"one point", rm(metricdata.Metrics{Name: "x", Data: metricdata.Gauge[float64]{DataPoints: dps(1)}}), false, 0, 0, 0, 0},
		{"nothing", rm(), false, 0, 0, 0, 0},
	} {
		a, b, ok := halve(tc.in)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		ma, pa := count(a)
		mb, pb := count(b)
		if ma != tc.ma || mb != tc.mb || pa != tc.pa || pb != tc.pb {
			t.Errorf("%s: halves of %d+%d metrics, %d+%d points; want %d+%d, %d+%d", tc.name, ma, mb, pa, pb, tc.ma, tc.mb, tc.pa, tc.pb)
		}
	}
}

func TestNewRefusesBadReceivers(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    export.Receiver
		want string
	}{
		{"type", export.Receiver{Name: "x", Type: "remote_write", URL: "http://h/v1/metrics"}, "not otlp"},
		{"scheme", export.Receiver{Name: "x", URL: "ftp://h/v1/metrics"}, "url"},
		{"no host", export.Receiver{Name: "x", URL: "http:///v1/metrics"}, "url"},
		{"credentials in the url", export.Receiver{Name: "x", URL: "http://u:p@h/v1/metrics"}, "credentials"},
		{"header name", export.Receiver{Name: "x", URL: "http://h/v1/metrics", Headers: map[string]string{"Bad Name": "v"}}, "header"},
		{"header value", export.Receiver{Name: "x", URL: "http://h/v1/metrics", Headers: map[string]string{"X-Scope-OrgID": "a\nb"}}, "header"},
		{"two authorizations", export.Receiver{Name: "x", URL: "http://h/v1/metrics", Headers: map[string]string{"authorization": "Bearer a"}, BearerTokenFile: "/f"}, "both"},
		{"timeout", export.Receiver{Name: "x", URL: "http://h/v1/metrics", Timeout: -time.Second}, "negative"},
	} {
		_, err := New(tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(export.Receiver{Name: "ok", Type: "otlp", URL: "https://h:4318/v1/metrics", Headers: map[string]string{"X-Scope-OrgID": "t1"}}); err != nil {
		t.Errorf("a good receiver: %v", err)
	}
}

func TestBearerTokenFileIsReadAtEachSend(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/token"
	s, err := NewWith(export.Receiver{Name: "x", URL: "http://h/v1/metrics", BearerTokenFile: file}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		content *string
		want    string
		err     string
	}{
		{"missing", nil, "", "read bearer_token_file"},
		{"empty", proto.String(" \n"), "", "empty"},
		{"a line", proto.String("tok-1\n"), "tok-1", ""},
		{"rotated", proto.String("tok-2"), "tok-2", ""},
		{"two lines", proto.String("tok\nmore"), "", "not a valid header value"},
		{"too long", proto.String(strings.Repeat("t", maxTokenBytes+1)), "", "longer than"},
	} {
		if tc.content != nil {
			if err := os.WriteFile(file, []byte(*tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.token()
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: token %q, error %v; want %q, an error saying %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestSendErrorsAreBounded(t *testing.T) {
	long := errors.New("failed to send: 400 Bad Request (body: " + strings.Repeat("out of order sample\n", 500) + ")")
	if m := short(long); len(m) > maxNodeErrorLen+len("…") || strings.Contains(m, "\n") || !strings.HasPrefix(m, "failed to send: 400 Bad Request") {
		t.Errorf("short: %d bytes %q", len(m), m)
	}
	var errs []error
	for i := range 1000 {
		errs = append(errs, fmt.Errorf("node n%d: %s", i, short(long)))
	}
	for _, tc := range []struct {
		n    int
		want string
	}{
		{1, "node n0:"},
		{3, "node n2:"},
		{1000, "(and 997 more nodes)"},
	} {
		m := firstErrors(errs[:tc.n]).Error()
		if !strings.Contains(m, tc.want) || strings.Contains(m, "node n3:") || len(m) > maxNodeErrors*(maxNodeErrorLen+40)+40 {
			t.Errorf("%d errors: %d bytes, want at most %d nodes named and %q", tc.n, len(m), maxNodeErrors, tc.want)
		}
	}
}
