package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// honestNode reports tcp_reset = 1 per report and counts what was acked,
// so the test can check that nothing another client did changed its data.
type honestNode struct {
	stream nbsv1.AgentService_ConnectClient
	seq    uint64
}

func startHonest(t *testing.T, ctx context.Context, client nbsv1.AgentServiceClient, node string) *honestNode {
	t.Helper()
	s, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(hello(node)); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || m.GetConfig() == nil {
		t.Fatalf("honest node: first answer %v, %v; want its Config", m, err)
	}
	return &honestNode{stream: s}
}

func (h *honestNode) send(t *testing.T, n int) {
	t.Helper()
	for range n {
		h.seq++
		if err := h.stream.Send(report(h.seq, sample("tcp_reset", 1))); err != nil {
			t.Fatalf("honest node: send: %v", err)
		}
		m, err := h.stream.Recv()
		if err != nil || m.GetAck().GetSequence() != h.seq {
			t.Fatalf("honest node: report %d answered %v, %v; want its Ack", h.seq, m, err)
		}
	}
}

// connectOnce opens a stream, sends msgs and returns how the stream ended
// (nil when it answered with a Config and the client then closed it).
func connectOnce(t *testing.T, client nbsv1.AgentServiceClient, msgs ...*nbsv1.ConnectRequest) (*nbsv1.ConnectResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		_ = s.Send(m)
	}
	return s.Recv()
}

// Every limit on what an agent controls answers with a clear status (or a
// Reject naming the field) and a count on /metrics, and leaves an honest
// agent's data exact.
func TestLimitsAgainstARealCollector(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) {
		c.Ingest.MaxMetrics = 6
		c.Ingest.MaxNodes = 6
		c.Ingest.MaxCapabilities = 8
		c.Ingest.MaxStreamsPerIP = 6
		c.Ingest.HelloTimeout = 2 * time.Second
	})
	client := dialCollector(t, col.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	honest := startHonest(t, ctx, client, "honest")
	honest.send(t, 5)

	withDef := func(node string, mut func(d *nbsv1.MetricDefinition)) *nbsv1.ConnectRequest {
		h := hello(node)
		mut(h.GetHello().Metrics[1])
		return h
	}
	manyCaps := hello("caps")
	for i := range 9 {
		manyCaps.GetHello().Capabilities = append(manyCaps.GetHello().Capabilities, &nbsv1.Capability{Name: fmt.Sprintf("c%d", i), Available: true})
	}
	nulCap := hello("caps")
	nulCap.GetHello().Capabilities = []*nbsv1.Capability{{Name: "btf", Reason: "no\x00btf"}}
	nulLabel := hello("labels")
	nulLabel.GetHello().Labels = map[string]string{"site": "a\x00"}
	t.Run("hello", func(t *testing.T) {
		cases := []struct {
			name string
			msg  *nbsv1.ConnectRequest
			code codes.Code
			want string
		}{
			{"NUL in a title", withDef("s1", func(d *nbsv1.MetricDefinition) { d.Title = "se\x00nt" }), codes.InvalidArgument, "metric tcp_reset/sent: title contains a NUL byte"},
			{"NUL in a description", withDef("s3", func(d *nbsv1.MetricDefinition) { d.Description = "\x00" }), codes.InvalidArgument, "description contains a NUL byte"},
			{"NUL in a label", nulLabel, codes.InvalidArgument, "label site value: contains a NUL byte"},
			{"NUL in a capability reason", nulCap, codes.InvalidArgument, "capability btf reason contains a NUL byte"},
			{"too many capabilities", manyCaps, codes.ResourceExhausted, "9 capabilities, at most 8 allowed"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := connectOnce(t, client, c.msg)
				if status.Code(err) != c.code || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("stream ended with %v; want %v mentioning %q", err, c.code, c.want)
				}
			})
		}
	})

	t.Run("definitions per node are cumulative across Hellos", func(t *testing.T) {
		// hello() defines 2 metrics; each Hello here adds 2 more roots.
		defs := func(extra ...string) *nbsv1.ConnectRequest {
			h := hello("defs")
			for _, id := range extra {
				h.GetHello().Metrics = append(h.GetHello().Metrics, &nbsv1.MetricDefinition{Id: id, Title: id, Kind: nbsv1.MetricKind_METRIC_KIND_GAUGE})
			}
			return h
		}
		for _, extra := range [][]string{{"a", "b"}, {"c", "d"}} {
			if m, err := connectOnce(t, client, defs(extra...)); err != nil || m.GetConfig() == nil {
				t.Fatalf("hello with %v: %v, %v; want its Config", extra, m, err)
			}
		}
		_, err := connectOnce(t, client, defs("e"))
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "would have 7 metric definitions (4 stored from earlier Hellos + 3 in this one), at most 6") {
			t.Fatalf("a Hello past the cumulative limit: %v; want ResourceExhausted naming it", err)
		}
	})

	t.Run("reports", func(t *testing.T) {
		h := hello("reporter")
		h.GetHello().Metrics = append(h.GetHello().Metrics, &nbsv1.MetricDefinition{Id: "lat", Title: "latency", Unit: "ns", Kind: nbsv1.MetricKind_METRIC_KIND_HISTOGRAM})
		s, err := client.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Send(h)
		if m, err := s.Recv(); err != nil || m.GetConfig() == nil {
			t.Fatalf("hello: %v, %v", m, err)
		}
		withHist := func(seq uint64, hs *nbsv1.Histogram) *nbsv1.ConnectRequest {
			r := report(seq)
			hs.MetricId = "lat"
			r.GetReport().Histograms = []*nbsv1.Histogram{hs}
			return r
		}
		withEvent := func(seq uint64, fields map[string]string) *nbsv1.ConnectRequest {
			r := report(seq)
			r.GetReport().Events = []*nbsv1.Event{{MetricId: "tcp_reset", TimeUnixNano: time.Now().UnixNano(), Fields: fields}}
			return r
		}
		cases := []struct {
			msg  *nbsv1.ConnectRequest
			want string
		}{
			{withHist(1, &nbsv1.Histogram{BucketIndex: []uint32{1 << 20}, BucketCount: []uint64{1}, Count: 1}), "past the layout"},
			{withHist(2, &nbsv1.Histogram{BucketIndex: []uint32{1, 2}, BucketCount: []uint64{1 << 63, 1 << 63}, Count: 0}), "overflows"},
			{withHist(3, &nbsv1.Histogram{}), "is empty"},
			{withHist(4, &nbsv1.Histogram{BucketIndex: []uint32{1}, BucketCount: []uint64{2}, Count: 3}), "does not equal the bucket total"},
			{withEvent(5, map[string]string{"comm": "cu\x00rl"}), "event field comm contains a NUL byte"},
		}
		for _, c := range cases {
			if err := s.Send(c.msg); err != nil {
				t.Fatal(err)
			}
			m, err := s.Recv()
			if err != nil || m.GetReject().GetSequence() != c.msg.GetReport().GetSequence() || !strings.Contains(m.GetReject().GetReason(), c.want) {
				t.Errorf("got %v, %v; want a Reject of %d mentioning %q", m, err, c.msg.GetReport().GetSequence(), c.want)
			}
		}
		// A good histogram after them is stored, and its series encodes.
		if err := s.Send(withHist(7, &nbsv1.Histogram{BucketIndex: []uint32{3, 40}, BucketCount: []uint64{2, 3}, Count: 5, Sum: 100})); err != nil {
			t.Fatal(err)
		}
		if m, err := s.Recv(); err != nil || m.GetAck().GetSequence() != 7 {
			t.Fatalf("good histogram: %v, %v; want its Ack", m, err)
		}
		if code, body := col.call(t, http.MethodGet, "/api/v1/nodes/reporter/series?metric=lat&step=1m", ""); code != http.StatusOK || !strings.Contains(string(body), `"p50"`) {
			t.Errorf("histogram series: HTTP %d %s", code, body)
		}
		// A clean end by the agent is no error.
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("after the agent closed its side: %v, want a clean end (io.EOF)", err)
		}
	})

	t.Run("a clock ahead moves nothing", func(t *testing.T) {
		s, err := client.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Send(hello("fast-clock"))
		if m, err := s.Recv(); err != nil || m.GetConfig() == nil {
			t.Fatalf("hello: %v, %v", m, err)
		}
		ahead := report(1, sample("tcp_reset", 100))
		ahead.GetReport().TimeUnixNano = time.Now().Add(9 * time.Minute).UnixNano()
		for i, r := range []*nbsv1.ConnectRequest{ahead, nil} {
			if i == 1 { // composed, as an agent does, after the first was sent
				time.Sleep(10 * time.Millisecond)
				r = report(2, sample("tcp_reset", 7))
			}
			if err := s.Send(r); err != nil {
				t.Fatal(err)
			}
			if m, err := s.Recv(); err != nil || m.GetAck() == nil {
				t.Fatalf("report %d: %v, %v; want an Ack", r.GetReport().GetSequence(), m, err)
			}
		}
		var tr treeResp
		if code := col.getJSON(t, "/api/v1/nodes/fast-clock/tree", &tr); code != http.StatusOK {
			t.Fatalf("tree: HTTP %d", code)
		}
		if n := tr.find("tcp_reset"); n == nil || n.Value == nil || *n.Value != 7 {
			t.Errorf("latest tcp_reset after a report dated 9 min ahead and a real one: %s; want the real one's 7", describeValue(n))
		}
		var node struct {
			OffsetMS *int64 `json:"clock_offset_ms"`
			Skewed   bool   `json:"clock_skewed"`
		}
		if code := col.getJSON(t, "/api/v1/nodes/fast-clock", &node); code != http.StatusOK || node.OffsetMS == nil || *node.OffsetMS < 8*60*1000 || !node.Skewed {
			t.Errorf("node view: HTTP %d offset %v skewed %v; want about 9 min ahead and skewed", code, node.OffsetMS, node.Skewed)
		}
	})

	t.Run("an oversized message is counted", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := client.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Send(hello("big"))
		_ = s.Send(report(1, sample(strings.Repeat("x", 5<<20), 1)))
		for err == nil { // the Config may come first
			_, err = s.Recv()
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("oversized: %v; want ResourceExhausted", err)
		}
	})

	t.Run("streams per address and the Hello timeout", func(t *testing.T) {
		var streams []nbsv1.AgentService_ConnectClient
		for range 7 {
			s, err := client.Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
		var refused, timedOut int
		for _, s := range streams {
			_, err := s.Recv()
			switch {
			case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "at most 6 allowed per source address"):
				refused++
			case status.Code(err) == codes.DeadlineExceeded && strings.Contains(err.Error(), "no Hello within 2s"):
				timedOut++
			default:
				t.Errorf("a silent stream ended with %v", err)
			}
		}
		// The honest node holds one of the 6.
		if refused < 2 || refused+timedOut != 7 {
			t.Errorf("%d refused and %d timed out; want at least 2 refused, the rest timed out", refused, timedOut)
		}
	})

	t.Run("nodes", func(t *testing.T) {
		var list struct {
			Nodes []struct{ Name string } `json:"nodes"`
		}
		if code := col.getJSON(t, "/api/v1/nodes", &list); code != http.StatusOK {
			t.Fatalf("nodes: HTTP %d", code)
		}
		var err error
		for i := len(list.Nodes); i <= 6; i++ {
			_, err = connectOnce(t, client, hello(fmt.Sprintf("extra-%d", i)))
		}
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "at most 6 allowed") {
			t.Fatalf("a new node past the limit: %v; want ResourceExhausted naming it", err)
		}
		// A known node still connects.
		if m, err := connectOnce(t, client, hello("reporter")); err != nil || m.GetConfig() == nil {
			t.Fatalf("a known node at the node limit: %v, %v; want its Config", m, err)
		}
	})

	honest.send(t, 5)
	eventually(t, 10*time.Second, func() string {
		if got := storedTotal(t, col, "honest", "tcp_reset"); got != 10 {
			return fmt.Sprintf("honest node's stored total %v, want 10", got)
		}
		return ""
	})
	_, body := col.call(t, http.MethodGet, "/metrics", "")
	for _, reason := range []string{"bad_string", "too_many_capabilities", "too_many_metrics", "bad_histogram", "message_too_large",
		"too_many_streams_per_address", "protocol", "too_many_nodes"} {
		if !strings.Contains(string(body), fmt.Sprintf(`nbs_collector_rejects_total{reason=%q}`, reason)) {
			t.Errorf("/metrics has no rejects of reason %s", reason)
		}
	}
}

func describeValue(n *treeNode) string {
	if n == nil || n.Value == nil {
		return "none"
	}
	return fmt.Sprint(*n.Value)
}

// A report dated 9 minutes ahead, saying OK, cannot hide a firing alert
// nor the CRIT reports that follow it.
func TestLimitsClockAheadCannotResolveAnAlert(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	client := dialCollector(t, col.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(hello("skewed"))
	if m, err := s.Recv(); err != nil || m.GetConfig() == nil {
		t.Fatalf("hello: %v, %v", m, err)
	}
	var seq uint64
	send := func(st nbsv1.State, ahead time.Duration) {
		t.Helper()
		seq++
		r := report(seq, &nbsv1.Sample{MetricId: "tcp_reset", Value: 50, State: st})
		r.GetReport().TimeUnixNano = time.Now().Add(ahead).UnixNano()
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
		if m, err := s.Recv(); err != nil || m.GetAck() == nil {
			t.Fatalf("report %d: %v, %v; want an Ack", seq, m, err)
		}
	}
	firing := func() bool {
		for _, a := range getAlerts(t, col).Alerts {
			if a.Node == "skewed" && a.State == "firing" {
				return true
			}
		}
		return false
	}
	eventually(t, 30*time.Second, func() string {
		send(nbsv1.State_STATE_CRIT, 0)
		time.Sleep(200 * time.Millisecond)
		if !firing() {
			return "no firing alert for node skewed after CRIT reports"
		}
		return ""
	})
	send(nbsv1.State_STATE_OK, 9*time.Minute)
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		send(nbsv1.State_STATE_CRIT, 0)
	}
	time.Sleep(2 * time.Second)
	if !firing() {
		t.Errorf("after an OK report 9 min ahead and 20 real CRIT reports, node skewed has no firing alert: %+v", getAlerts(t, col).Alerts)
	}
}
