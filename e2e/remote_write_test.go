package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"google.golang.org/protobuf/proto"

	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/export/remotewrite"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// rwPrometheus is a real Prometheus (Debian's, 2.x) on loopback with its
// remote write receiver on, that can be stopped and started again on the
// same address and storage.
type rwPrometheus struct {
	tb        testing.TB
	bin, addr string
	dir       string
	cmd       *exec.Cmd
	exited    chan struct{}
	out       *bytes.Buffer
}

func rwPrometheusBinary(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	const msg = "prometheus not found (apt-get install prometheus)"
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s; CI=true requires it", msg)
	}
	tb.Skip(msg)
	return ""
}

// startRWPrometheus runs Prometheus with the remote write receiver, and
// scraping whatever scrape configs hold (YAML list items, may be empty).
func startRWPrometheus(tb testing.TB, bin, scrape string) *rwPrometheus {
	tb.Helper()
	p := &rwPrometheus{tb: tb, bin: bin, addr: freeAddr(tb), dir: tb.TempDir()}
	cfg := "global: {scrape_interval: 2s, evaluation_interval: 2s}\nscrape_configs:\n" + scrape
	if scrape == "" {
		cfg = "global: {scrape_interval: 2s}\n"
	}
	if err := os.WriteFile(filepath.Join(p.dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	p.start()
	tb.Cleanup(p.stop)
	return p
}

func (p *rwPrometheus) start() {
	p.tb.Helper()
	p.out = &bytes.Buffer{}
	p.cmd = exec.Command(p.bin, "--config.file="+filepath.Join(p.dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(p.dir, "data"),
		"--web.listen-address="+p.addr, "--web.enable-remote-write-receiver", "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		p.tb.Fatalf("start prometheus: %v", err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(p.cmd, p.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + p.addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.exited:
			p.tb.Fatalf("prometheus exited: %s", p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			p.tb.Fatalf("prometheus not ready within 30s: %s", p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends Prometheus cleanly (SIGTERM: its WAL is flushed, so what it
// acknowledged survives the restart).
func (p *rwPrometheus) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// query runs an instant query and returns its result's raw JSON.
func (p *rwPrometheus) query(expr string) json.RawMessage {
	p.tb.Helper()
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?" + url.Values{"query": {expr}}.Encode())
	if err != nil {
		p.tb.Fatalf("query %s: %v", expr, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		p.tb.Fatalf("query %s: %v %s", expr, err, r.Error)
	}
	return r.Data.Result
}

type rwPoint struct {
	at    int64 // ms
	value float64
}

// series returns the raw samples of the one series expr selects over
// the range (a range selector: exactly what Prometheus stored).
func (p *rwPrometheus) samples(sel string, rng time.Duration) []rwPoint {
	p.tb.Helper()
	var res []struct {
		Values [][2]any `json:"values"`
	}
	if err := json.Unmarshal(p.query(fmt.Sprintf("%s[%ds]", sel, int(rng.Seconds()))), &res); err != nil {
		p.tb.Fatal(err)
	}
	if len(res) != 1 {
		p.tb.Fatalf("%s: %d series, want 1", sel, len(res))
	}
	var out []rwPoint
	for _, v := range res[0].Values {
		sec, _ := v[0].(float64)
		f, err := strconv.ParseFloat(v[1].(string), 64)
		if err != nil {
			p.tb.Fatal(err)
		}
		out = append(out, rwPoint{at: int64(math.Round(sec * 1000)), value: f})
	}
	return out
}

// latest returns each series expr selects, by its labels but job and
// instance, with its newest value.
func (p *rwPrometheus) latest(expr string) map[string]float64 {
	p.tb.Helper()
	var res []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	if err := json.Unmarshal(p.query(expr), &res); err != nil {
		p.tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, r := range res {
		delete(r.Metric, "job")
		delete(r.Metric, "instance")
		f, _ := strconv.ParseFloat(r.Value[1].(string), 64)
		out[rwLabelKey(r.Metric)] = f
	}
	return out
}

func rwLabelKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, m[k])
	}
	return b.String()
}

// rwAgent is a raw agent reporting resets to one collector.
type rwAgent struct {
	t      *testing.T
	name   string
	seq    uint64
	stream nbsv1.AgentService_ConnectClient
	cancel context.CancelFunc
	// sent is the sum of every reset reported (and acknowledged).
	sent float64
}

func (a *rwAgent) connect(addr string) {
	a.t.Helper()
	if a.cancel != nil {
		a.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.t.Cleanup(cancel)
	var err error
	if a.stream, err = dialCollector(a.t, addr).Connect(ctx); err != nil {
		a.t.Fatal(err)
	}
	if err := a.stream.Send(hello(a.name)); err != nil {
		a.t.Fatal(err)
	}
	for {
		m, err := a.stream.Recv()
		if err != nil {
			a.t.Fatalf("%s: waiting for its config: %v", a.name, err)
		}
		if m.GetConfig() != nil {
			return
		}
	}
}

// resets reports n resets sent and waits for the ack.
func (a *rwAgent) resets(n float64) {
	a.t.Helper()
	a.seq++
	if err := a.stream.Send(report(a.seq, sample("tcp_reset", n), sample("tcp_reset/sent", n))); err != nil {
		a.t.Fatalf("%s: send report: %v", a.name, err)
	}
	for {
		m, err := a.stream.Recv()
		if err != nil {
			a.t.Fatalf("%s: waiting for the ack of %d: %v", a.name, a.seq, err)
		}
		if m.GetReject() != nil {
			a.t.Fatalf("%s: report %d rejected: %v", a.name, a.seq, m.GetReject())
		}
		if m.GetAck().GetSequence() == a.seq {
			a.sent += n
			return
		}
	}
}

// pushStatus is the push receiver prom and its export's ledger, as GET
// /api/v1/export/status shows them.
func pushStatus(t *testing.T, c *collector) (export.ReceiverStatus, export.KindStatus) {
	t.Helper()
	var st export.Status
	if code := c.getJSON(t, "/api/v1/export/status", &st); code != http.StatusOK {
		t.Fatalf("export status: HTTP %d", code)
	}
	var r export.ReceiverStatus
	var k export.KindStatus
	for _, x := range st.Receivers {
		if x.Name == "prom" {
			r = x
		}
	}
	for _, x := range st.Exports {
		if x.Kind == "prom" {
			k = x
		}
	}
	return r, k
}

// collectorMetric reads the collector's own /metrics: the sum of name's
// series of receiver (of all, for "").
func collectorMetric(t *testing.T, c *collector, name, receiver string) float64 {
	t.Helper()
	code, body := c.call(t, "GET", "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, m := range fams[name].GetMetric() {
		ok := receiver == ""
		for _, l := range m.GetLabel() {
			ok = ok || l.GetName() == "receiver" && l.GetValue() == receiver
		}
		if ok {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return total
}

// The collector pushes its export to a real Prometheus by remote write,
// through a 60 s outage of Prometheus and a collector restart within it:
// every snapshot's sample of the resets counter is in Prometheus once
// (one every push interval, no gap, no extra), the counter's increase
// over the run is what the agent reported, and at the end the pushed
// series are the ones the same Prometheus scrapes from the export
// endpoint, value for value.
func TestRemoteWriteSurvivesOutageAndRestart(t *testing.T) {
	t.Parallel()
	bin := rwPrometheusBinary(t)
	dbURL := pgcluster.Database(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	queueDir := t.TempDir()
	scrapeToken := adminToken(t, dbURL)
	prom := startRWPrometheus(t, bin, fmt.Sprintf(`  - job_name: nbs-export
    metrics_path: /api/v1/export/metrics
    authorization: {credentials: %q}
    static_configs: [{targets: [%q]}]
`, scrapeToken, httpAddr))
	const interval = 3 * time.Second
	receiver := fmt.Sprintf(`{name: prom, url: "http://%s/api/v1/write", timeout: 2s}`, prom.addr)
	start := func() *collector {
		return startCollector(t, dbURL, grpcAddr, func(c *collectorapp.Config) {
			c.HTTPAddr = httpAddr
			// A short backoff: the queue goes out soon after Prometheus is back.
			c.Push.Interval, c.Push.MaxBackoff, c.Push.QueueDir, c.Push.Receivers = interval, 2*time.Second, queueDir, []string{receiver}
		})
	}
	began := time.Now()
	col := start()
	a := &rwAgent{t: t, name: "rw-1"}
	a.connect(grpcAddr)
	// The first increase is held back (--export.counter-hold, 1m), so the
	// first pushed sample is 0 and the run's increase is every reset.
	a.resets(3)
	const counter = `nbs_tcp_resets_total{node="rw-1",direction="",job=""}`
	eventually(t, 20*time.Second, func() string {
		if got := prom.latest(counter); len(got) != 1 {
			return fmt.Sprintf("pushed %s: %v", counter, got)
		}
		return ""
	})
	report := func(until time.Time) {
		for n := 1.0; time.Now().Before(until); n++ {
			a.resets(math.Mod(n, 4) + 1)
			time.Sleep(time.Second)
		}
	}
	report(time.Now().Add(6 * time.Second))

	// Prometheus away for 60 s; the collector restarts within it, with
	// snapshots in its queue that it could not send.
	prom.stop()
	down := time.Now()
	report(down.Add(25 * time.Second))
	if q := collectorMetric(t, col, "nbs_collector_export_push_queue_snapshots", "prom"); q < 3 {
		t.Fatalf("%v snapshots queued after 25 s without the receiver, want at least 3", q)
	}
	if f := collectorMetric(t, col, "nbs_collector_export_push_samples_failed_total", "prom"); f == 0 {
		t.Fatal("no failed sends counted while the receiver was away")
	}
	if r, _ := pushStatus(t, col); r.QueueBytes == 0 || r.QueueOldest == nil || !strings.Contains(r.LastError, "connection refused") {
		t.Fatalf("export status while the receiver is away: %+v, want its queue and its error", r)
	}
	col.stop()
	col = start()
	a.connect(grpcAddr)
	report(down.Add(60 * time.Second))
	prom.start()

	// Everything queued reaches Prometheus; then one more snapshot after
	// the agent's last report, so pushed and scraped hold the same.
	eventually(t, 60*time.Second, func() string {
		if q := collectorMetric(t, col, "nbs_collector_export_push_queue_snapshots", "prom"); q != 0 {
			return fmt.Sprintf("%v snapshots still queued", q)
		}
		return ""
	})
	last := time.Now()
	if d := collectorMetric(t, col, "nbs_collector_export_push_samples_dropped_total", "prom"); d != 0 {
		t.Fatalf("%v samples dropped", d)
	}

	// Every snapshot once: the pushed samples are as many as the push
	// interval's ticks over the run (the restart's gap aside), so none was
	// lost in the outage or the restart and none sent twice under another
	// time (or by two pushers). Counted, not timed: under load a snapshot
	// may come a second late, which shortens the next step but adds or
	// removes nothing, so this holds beside the other tests of make test.
	var points []rwPoint
	eventually(t, 3*interval, func() string {
		points = prom.samples(counter, time.Since(began)+time.Minute)
		if newest := time.UnixMilli(points[len(points)-1].at); newest.Before(last) {
			return fmt.Sprintf("newest pushed sample at %s, before the last report at %s", newest, last)
		}
		return ""
	})
	var restart time.Duration // the one long step: the collector's restart
	for i := 1; i < len(points); i++ {
		step := time.Duration(points[i].at-points[i-1].at) * time.Millisecond
		if points[i].value < points[i-1].value {
			t.Errorf("counter fell from %v to %v at %s", points[i-1].value, points[i].value, time.UnixMilli(points[i].at))
		}
		if step <= 0 {
			t.Errorf("two samples at %s", time.UnixMilli(points[i].at))
		}
		if step > 2*interval {
			if restart > 0 {
				t.Errorf("samples %s apart at %s, after a gap of %s already: snapshots lost", step, time.UnixMilli(points[i].at), restart)
			}
			restart = step
			if step > interval+15*time.Second {
				t.Errorf("samples %s apart at %s: snapshots lost", step, time.UnixMilli(points[i].at))
			}
		}
	}
	span := time.Duration(points[len(points)-1].at-points[0].at)*time.Millisecond - restart
	ticks := int(span / interval)
	if n := len(points) - 1; n < ticks || n > ticks+2 {
		t.Errorf("%d samples over %s (the restart's %s aside), want one every %s (%d): snapshots lost or sent twice", len(points), span.Round(time.Second), restart.Round(time.Second), interval, ticks+1)
	}
	if inc := points[len(points)-1].value - points[0].value; inc != a.sent {
		t.Errorf("the pushed counter rose by %v over the run, the agent reported %v resets", inc, a.sent)
	}
	t.Logf("%d samples over %s, increase %v; Prometheus away %s", len(points), span.Round(time.Second), a.sent, 60*time.Second)

	// Pushed and scraped: the same series with the same values.
	eventually(t, 20*time.Second, func() string {
		pushed := prom.latest(`{__name__=~"nbs_.+",job=""}`)
		scraped := prom.latest(`{__name__=~"nbs_.+",job="nbs-export"}`)
		var diff []string
		for k, v := range scraped {
			if pv, ok := pushed[k]; !ok || pv != v {
				diff = append(diff, fmt.Sprintf("%s scraped %v pushed %v (%v)", k, v, pv, ok))
			}
		}
		for k := range pushed {
			if _, ok := scraped[k]; !ok {
				diff = append(diff, k+" pushed, not scraped")
			}
		}
		if len(scraped) < 4 || len(diff) > 0 {
			slices.Sort(diff)
			return fmt.Sprintf("%d scraped, %d pushed series; differ: %s", len(scraped), len(pushed), strings.Join(diff, "; "))
		}
		return ""
	})
}

// rwSnapshot is one counter series of node n at `at` with value v.
func rwSnapshot(at time.Time, v float64) export.Snapshot {
	return export.Snapshot{Now: at, Families: []*dto.MetricFamily{{
		Name: proto.String("nbs_tcp_resets_total"), Help: proto.String("resets"), Type: dto.MetricType_COUNTER.Enum(),
		Metric: []*dto.Metric{{Label: []*dto.LabelPair{{Name: proto.String("node"), Value: proto.String("answers")}},
			Counter: &dto.Counter{Value: proto.Float64(v)}}}}}}
}

// What a real Prometheus answers the sender, which the pusher's "nothing
// lost, nothing doubled" rests on: the same snapshot sent again is taken
// (an identical sample at the newest time is a duplicate, not an error);
// an older one — a deposed leader's queue after a failover, or a queue
// older than the receiver's head — is refused 400 "out of order", which
// the sender makes permanent (dropped and counted, never retried forever);
// so is a different value at the same time; and a 2.0 request to a
// receiver that speaks only 1.0 is refused rather than taken as sent.
func TestRemoteWriteAnswersOfPrometheus(t *testing.T) {
	t.Parallel()
	prom := startRWPrometheus(t, rwPrometheusBinary(t), "")
	ctx := context.Background()
	v1, err := remotewrite.New(export.Receiver{Name: "p", URL: "http://" + prom.addr + "/api/v1/write"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := remotewrite.New(export.Receiver{Name: "p", URL: "http://" + prom.addr + "/api/v1/write", Version: "2.0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// In the past, so an instant query now sees every sample.
	now := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	refused := func(err error) *remotewrite.StatusError {
		t.Helper()
		var se *remotewrite.StatusError
		if !export.IsPermanent(err) || !errors.As(err, &se) {
			t.Fatalf("err %v: want a permanent refusal", err)
		}
		var rej interface{ RejectedSamples() int }
		if !errors.As(err, &rej) || rej.RejectedSamples() != 1 {
			t.Fatalf("err %v: want 1 sample counted as refused", err)
		}
		return se
	}
	for i, step := range []struct {
		name string
		s    *remotewrite.Sender
		snap export.Snapshot
		// check is nil for a success.
		check func(error)
	}{
		{"first", v1, rwSnapshot(now, 5), nil},
		{"newer", v1, rwSnapshot(now.Add(5*time.Second), 7), nil},
		{"the same again", v1, rwSnapshot(now.Add(5*time.Second), 7), nil},
		{"older", v1, rwSnapshot(now, 5), func(err error) {
			if se := refused(err); !se.OutOfOrder() {
				t.Fatalf("older snapshot: %v, want out of order", se)
			}
		}},
		{"other value at the same time", v1, rwSnapshot(now.Add(5*time.Second), 8), func(err error) {
			if se := refused(err); !se.OutOfOrder() {
				t.Fatalf("same time, other value: %v, want a duplicate refusal", se)
			}
		}},
		{"2.0 to a 1.0 receiver", v2, rwSnapshot(now.Add(10*time.Second), 9), func(err error) {
			if !export.IsPermanent(err) || !strings.Contains(err.Error(), "does not speak 2.0") {
				t.Fatalf("2.0 to Prometheus 2: %v, want a permanent error saying it does not speak 2.0", err)
			}
		}},
	} {
		err := step.s.Send(ctx, step.snap)
		if step.check == nil {
			if err != nil {
				t.Fatalf("step %d (%s): %v", i, step.name, err)
			}
			continue
		}
		step.check(err)
	}
	got := prom.samples(`nbs_tcp_resets_total{node="answers"}`, time.Hour)
	want := []rwPoint{{now.UnixMilli(), 5}, {now.Add(5 * time.Second).UnixMilli(), 7}}
	if !slices.Equal(got, want) {
		t.Fatalf("Prometheus holds %v, want %v", got, want)
	}

	// A series gone from the export gets a staleness marker (the pusher's
	// withStaleMarkers): it leaves instant queries at once, as a series
	// gone from a scrape does, not after the 5 min lookback.
	const instant = `nbs_tcp_resets_total{node="answers"}`
	if res := prom.latest(instant); len(res) != 1 {
		t.Fatalf("%s before the marker: %v", instant, res)
	}
	if err := v1.Send(ctx, rwSnapshot(now.Add(15*time.Second), math.Float64frombits(0x7ff0000000000002))); err != nil {
		t.Fatalf("staleness marker: %v", err)
	}
	if res := prom.latest(instant); len(res) != 0 {
		t.Fatalf("%s after the marker: %v, want nothing", instant, res)
	}
}

// Two collectors behind one database, both configured with the receiver:
// only the push leader takes snapshots, so Prometheus holds one sample an
// interval, not two; when the leader stops, the other takes over and the
// samples go on with one step off the interval.
func TestRemoteWriteOneLeaderPushes(t *testing.T) {
	t.Parallel()
	bin := rwPrometheusBinary(t)
	dbURL := pgcluster.Database(t)
	prom := startRWPrometheus(t, bin, "")
	const interval = 3 * time.Second
	receiver := fmt.Sprintf(`{name: prom, url: "http://%s/api/v1/write", timeout: 2s}`, prom.addr)
	start := func() *collector {
		return startCollector(t, dbURL, "127.0.0.1:0", func(c *collectorapp.Config) {
			c.Push.Interval, c.Push.QueueDir, c.Push.Receivers = interval, t.TempDir(), []string{receiver}
		})
	}
	first := start()
	eventually(t, 10*time.Second, func() string {
		if collectorMetric(t, first, "nbs_collector_export_push_leader", "") != 1 {
			return "the first collector does not lead the push"
		}
		return ""
	})
	second := start()
	a := &rwAgent{t: t, name: "rw-2"}
	a.connect(first.grpcAddr)
	a.resets(1)
	const counter = `nbs_tcp_resets_total{node="rw-2",direction=""}`
	count := func() int {
		var res []struct {
			Values [][2]any `json:"values"`
		}
		if err := json.Unmarshal(prom.query(counter+"[10m]"), &res); err != nil || len(res) == 0 {
			return 0
		}
		return len(res[0].Values)
	}
	eventually(t, 40*time.Second, func() string {
		if n := count(); n < 3 {
			return fmt.Sprintf("%d samples pushed", n)
		}
		return ""
	})
	if collectorMetric(t, second, "nbs_collector_export_push_leader", "") != 0 {
		t.Fatal("both collectors lead the push")
	}
	first.stop()
	before := count()
	eventually(t, 40*time.Second, func() string {
		if n := count(); n < before+2 {
			return fmt.Sprintf("%d samples pushed since the leader stopped", n-before)
		}
		return ""
	})
	if collectorMetric(t, second, "nbs_collector_export_push_leader", "") != 1 {
		t.Fatal("the second collector did not take the push over")
	}
	// One sample per push interval over the run, the takeover's gap aside:
	// two collectors pushing would double them, a takeover that lost
	// snapshots would leave a long gap. Counted, not timed (a snapshot a
	// second late under load changes neither).
	points := prom.samples(counter, 10*time.Minute)
	var takeover time.Duration
	for i := 1; i < len(points); i++ {
		step := time.Duration(points[i].at-points[i-1].at) * time.Millisecond
		if step <= 0 {
			t.Errorf("two samples at %s", time.UnixMilli(points[i].at))
		}
		if step > 2*interval {
			if takeover > 0 || step > interval+6*time.Second {
				t.Errorf("samples %s apart at %s: the takeover lost snapshots", step, time.UnixMilli(points[i].at))
			}
			takeover = step
		}
	}
	span := time.Duration(points[len(points)-1].at-points[0].at)*time.Millisecond - takeover
	if n, ticks := len(points)-1, int(span/interval); n < ticks || n > ticks+2 {
		t.Errorf("%d samples over %s (the takeover's %s aside), want one every %s: two collectors pushed or snapshots were lost", len(points), span.Round(time.Second), takeover, interval)
	}
	if d := collectorMetric(t, second, "nbs_collector_export_push_samples_dropped_total", "prom"); d != 0 {
		t.Errorf("%v samples dropped", d)
	}
	if r, k := pushStatus(t, second); r.Type != "remote_write" || r.Sent == 0 || r.LastSuccess == nil || r.LastError != "" || k.Series == 0 || k.Exports == 0 {
		t.Errorf("export status of the new leader: receiver %+v, exports %+v", r, k)
	}
}

// rwPrometheus3Binary is Prometheus 3, built from its Go module by
// tools/prometheus/build.sh (cached per version; make test builds it
// first). Debian's Prometheus 2 speaks remote write 1.0 only.
func rwPrometheus3Binary(t *testing.T) string {
	t.Helper()
	script := filepath.Join("..", "tools", "prometheus", "build.sh")
	if _, err := os.Stat(script); err != nil {
		const msg = "tools/prometheus/build.sh not found: it builds Prometheus 3 (branch otlp)"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s; CI=true requires it", msg)
		}
		t.Skip(msg)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build Prometheus 3 (%s): %v: %s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// rwTwoSeries is the counter of rwSnapshot and a second series, node
// other, so a request can hold a refused sample beside a good one.
func rwTwoSeries(at time.Time, v float64, other string) export.Snapshot {
	s := rwSnapshot(at, v)
	mf := s.Families[0]
	mf.Metric = append(mf.Metric, &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String("node"), Value: proto.String(other)}},
		Counter: &dto.Counter{Value: proto.Float64(v)}})
	return s
}

// What Prometheus 3 answers remote write 2.0 and 1.0: 2.0 is taken with
// its symbols table and metadata; a resend is a duplicate; a request with
// an out-of-order sample beside a new series stores the new one and is
// answered 400 with how many it wrote, so only the refused sample counts
// as dropped; 1.0 refuses such a request whole.
func TestRemoteWriteAnswersOfPrometheus3(t *testing.T) {
	t.Parallel()
	prom := startRWPrometheus(t, rwPrometheus3Binary(t), "")
	ctx := context.Background()
	sender := func(version string) *remotewrite.Sender {
		s, err := remotewrite.New(export.Receiver{Name: "p", URL: "http://" + prom.addr + "/api/v1/write", Version: version}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	v1, v2 := sender("1.0"), sender("2.0")
	now := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	rejected := func(err error) int {
		t.Helper()
		var rej interface{ RejectedSamples() int }
		if !export.IsPermanent(err) || !errors.As(err, &rej) {
			t.Fatalf("err %v: want a permanent refusal", err)
		}
		var se *remotewrite.StatusError
		if !errors.As(err, &se) || !se.OutOfOrder() {
			t.Fatalf("err %v: want an out-of-order refusal", err)
		}
		return rej.RejectedSamples()
	}
	if err := v2.Send(ctx, rwSnapshot(now.Add(5*time.Second), 7)); err != nil {
		t.Fatalf("2.0: %v", err)
	}
	if err := v2.Send(ctx, rwSnapshot(now.Add(5*time.Second), 7)); err != nil {
		t.Fatalf("2.0 again: %v", err)
	}
	if n := rejected(v2.Send(ctx, rwTwoSeries(now, 5, "new-in-v2"))); n != 1 {
		t.Fatalf("2.0, one sample out of order beside a new series: %d refused, want 1", n)
	}
	if n := rejected(v1.Send(ctx, rwTwoSeries(now, 5, "new-in-v1"))); n != 2 {
		t.Fatalf("1.0, one sample out of order beside a new series: %d refused, want the request's 2", n)
	}
	if got, want := prom.samples(`nbs_tcp_resets_total{node="answers"}`, time.Hour), []rwPoint{{now.Add(5 * time.Second).UnixMilli(), 7}}; !slices.Equal(got, want) {
		t.Fatalf("answers: Prometheus holds %v, want %v", got, want)
	}
	if got, want := prom.samples(`nbs_tcp_resets_total{node="new-in-v2"}`, time.Hour), []rwPoint{{now.UnixMilli(), 5}}; !slices.Equal(got, want) {
		t.Fatalf("new-in-v2: Prometheus holds %v, want %v", got, want)
	}
	if res := prom.query(`nbs_tcp_resets_total{node="new-in-v1"}[1h]`); string(res) != "[]" {
		t.Fatalf("new-in-v1: Prometheus holds %s, want nothing (1.0 refuses the request whole)", res)
	}
}
