package ingest

import (
	"context"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Strings PostgreSQL cannot store, and capabilities beyond the limit, are
// refused in the Hello with the field they are in.
func TestHelloStringsAndCapabilities(t *testing.T) {
	def := func(mut func(d *nbsv1.MetricDefinition)) *nbsv1.MetricDefinition {
		d := &nbsv1.MetricDefinition{Id: "tcp_reset", Title: "resets", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}
		mut(d)
		return d
	}
	many := make([]*nbsv1.Capability, 257)
	for i := range many {
		many[i] = &nbsv1.Capability{Name: "c", Available: true}
	}
	cases := []struct {
		name   string
		mut    func(h *nbsv1.Hello)
		reason string
		want   string
	}{
		{"NUL in a title", func(h *nbsv1.Hello) {
			h.Metrics = []*nbsv1.MetricDefinition{def(func(d *nbsv1.MetricDefinition) { d.Title = "re\x00sets" })}
		},
			"bad_string", "metric tcp_reset: title contains a NUL byte"},
		{"invalid UTF-8 in a unit", func(h *nbsv1.Hello) {
			h.Metrics = []*nbsv1.MetricDefinition{def(func(d *nbsv1.MetricDefinition) { d.Unit = "\xff" })}
		},
			"bad_string", "metric tcp_reset: unit is not valid UTF-8"},
		{"NUL in a description", func(h *nbsv1.Hello) {
			h.Metrics = []*nbsv1.MetricDefinition{def(func(d *nbsv1.MetricDefinition) { d.Description = "a\x00" })}
		}, "bad_string", "description contains a NUL byte"},
		{"NUL in a capability name", func(h *nbsv1.Hello) { h.Capabilities = []*nbsv1.Capability{{Name: "b\x00tf"}} },
			"bad_string", "capability name contains a NUL byte"},
		{"invalid UTF-8 in a capability reason", func(h *nbsv1.Hello) { h.Capabilities = []*nbsv1.Capability{{Name: "btf", Reason: "\xc3"}} },
			"bad_string", "capability btf reason is not valid UTF-8"},
		{"NUL in the agent version", func(h *nbsv1.Hello) { h.AgentVersion = "1\x00" }, "bad_string", "agent_version contains a NUL byte"},
		{"too many capabilities", func(h *nbsv1.Hello) { h.Capabilities = many }, "too_many_capabilities", "257 capabilities, at most 256 allowed"},
		{"too many metrics", func(h *nbsv1.Hello) {
			for range 20001 {
				h.Metrics = append(h.Metrics, h.Metrics[0])
			}
		}, "too_many_metrics", "at most 20000 allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &nbsv1.Hello{NodeName: "web-1", InstanceId: 1, IntervalMs: 1000, Metrics: []*nbsv1.MetricDefinition{def(func(*nbsv1.MetricDefinition) {})}}
			c.mut(h)
			_, _, rej := DefaultLimits().checkHello(h)
			if rej == nil || rej.reason != c.reason || !strings.Contains(rej.msg, c.want) {
				t.Fatalf("checkHello = %v, want %s containing %q", rej, c.reason, c.want)
			}
		})
	}
}

// Reports: histograms outside the layout or inconsistent, strings that
// cannot be stored, and definitions past the node's cumulative limit.
func TestReportLimits(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	hist := func(idx []uint32, cnt []uint64, count uint64, sum float64) *nbsv1.Report {
		return &nbsv1.Report{Histograms: []*nbsv1.Histogram{{MetricId: "lat", BucketIndex: idx, BucketCount: cnt, Count: count, Sum: sum}}}
	}
	cases := []struct {
		name      string
		r         *nbsv1.Report
		otherDefs int
		reason    string // "" = accepted
		want      string
	}{
		{"a good histogram", hist([]uint32{1, 5}, []uint64{2, 3}, 5, 10), 0, "", ""},
		{"a bucket index past the layout", hist([]uint32{loglinear.Buckets}, []uint64{1}, 1, 1), 0, "bad_histogram", "past the layout"},
		{"the last bucket of the layout", hist([]uint32{loglinear.Buckets - 1}, []uint64{1}, 1, 1), 0, "", ""},
		{"a count that wraps", hist([]uint32{1, 2}, []uint64{math.MaxUint64, 1}, 0, 1), 0, "bad_histogram", "overflows"},
		{"counts that overflow int64", hist([]uint32{1, 2}, []uint64{math.MaxInt64, 1}, 1<<63, 1), 0, "bad_histogram", "overflows"},
		{"count not the bucket total", hist([]uint32{1}, []uint64{2}, 3, 1), 0, "bad_histogram", "does not equal the bucket total"},
		{"an empty histogram", hist(nil, nil, 0, 0), 0, "bad_histogram", "is empty"},
		{"a zero bucket", hist([]uint32{1}, []uint64{0}, 0, 0), 0, "bad_histogram", "count 0 is zero"},
		{"a NaN sum", hist([]uint32{1}, []uint64{1}, 1, math.NaN()), 0, "bad_histogram", "sum NaN is not a finite number"},
		{"an infinite sum", hist([]uint32{1}, []uint64{1}, 1, math.Inf(1)), 0, "bad_histogram", "sum +Inf"},
		{"NUL in an event field", &nbsv1.Report{Events: []*nbsv1.Event{{MetricId: "rst", Fields: map[string]string{"comm": "a\x00b"}}}}, 0,
			"bad_string", "event field comm contains a NUL byte"},
		{"invalid UTF-8 in an event key", &nbsv1.Report{Events: []*nbsv1.Event{{MetricId: "rst", Fields: map[string]string{"\xff": "x"}}}}, 0,
			"bad_string", "event field key is not valid UTF-8"},
		{"NUL in a new metric's title", &nbsv1.Report{NewMetrics: []*nbsv1.MetricDefinition{{Id: "rst/x", Title: "\x00", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}}, 0,
			"bad_string", "metric rst/x: title contains a NUL byte"},
		{"definitions of earlier streams count", &nbsv1.Report{NewMetrics: []*nbsv1.MetricDefinition{{Id: "rst/x", Title: "x", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}},
			19998, "too_many_metrics", "more than 20000 metric definitions (20000 defined so far"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &stream{metrics: metricSet{base: map[string]streamMetric{"lat": {id: 1, kind: store.KindHistogram}, "rst": {id: 2, kind: store.KindRate}}}, otherDefs: int32(c.otherDefs)}
			c.r.Sequence, c.r.TimeUnixNano, c.r.IntervalMs = 1, now.UnixNano(), 1000
			_, _, rej := DefaultLimits().checkReport(c.r, st, now)
			switch {
			case c.reason == "" && rej != nil:
				t.Fatalf("checkReport = %v, want accepted", rej)
			case c.reason != "" && (rej == nil || rej.reason != c.reason || !strings.Contains(rej.msg, c.want)):
				t.Fatalf("checkReport = %v, want %s containing %q", rej, c.reason, c.want)
			}
		})
	}
}

// A node's clock offset is the largest recent (report time − receipt
// time): a resent old report does not make a node look behind.
func TestClockOffsetEstimate(t *testing.T) {
	s := &Server{streams: map[string]*stream{}, clock: map[string]time.Duration{}}
	st := &stream{node: store.Node{Name: "web-1"}}
	s.streams["web-1"] = st
	for _, d := range []time.Duration{9 * time.Second, -time.Hour, 8 * time.Second} {
		s.noteClock(st, d)
	}
	if d, ok := s.ClockOffset("web-1"); !ok || d != 9*time.Second {
		t.Fatalf("ClockOffset = %s %v, want 9s", d, ok)
	}
	for range clockSamples {
		s.noteClock(st, 10*time.Millisecond)
	}
	if d, _ := s.ClockOffset("web-1"); d != 10*time.Millisecond {
		t.Fatalf("ClockOffset after %d new reports = %s, want 10ms", clockSamples, d)
	}
	if _, ok := s.ClockOffset("web-2"); ok {
		t.Fatal("a node without a stream has a clock offset")
	}
}

// Streams are bounded per source address before any Hello; one that never
// sends a Hello is ended after the timeout and frees its place.
func TestStreamLimits(t *testing.T) {
	reg := &countingRegistry{upserts: map[string][]store.Node{}}
	m := telemetry.New()
	log := slog.New(slog.DiscardHandler)
	lim := DefaultLimits()
	lim.MaxStreamsPerIP = 2
	srv := NewServer(reg, NewWriter(nil, WriterOptions{}, log, m), ServerOptions{Limits: lim, HelloTimeout: 500 * time.Millisecond}, log, m)
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	nbsv1.RegisterAgentServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := nbsv1.NewAgentServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var silent []nbsv1.AgentService_ConnectClient
	for range 2 {
		s, err := c.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, s)
	}
	waitOpen := func(n int) {
		for srv.openStreams() != n {
			if ctx.Err() != nil {
				t.Fatalf("open streams = %d, want %d", srv.openStreams(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOpen(2)
	third, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := third.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "at most 2 allowed per source address") {
		t.Fatalf("third stream from one address: %v, want ResourceExhausted naming the limit", err)
	}
	for _, s := range silent {
		if _, err := s.Recv(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no Hello within 500ms") {
			t.Fatalf("a stream without a Hello: %v, want DeadlineExceeded", err)
		}
	}
	waitOpen(0)
}
