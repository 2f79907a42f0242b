package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/agent/uplink"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// buildAgent builds the real nbs-agent binary for tests that must kill it
// the way an operator or the OOM killer would.
func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nbs-agent")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nbs-project/nbs/agent/cmd/nbs-agent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nbs-agent: %v\n%s", err, out)
	}
	return bin
}

// agentProcess runs bin with args, its output in the test's log, until it
// is killed.
type agentProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startAgentProcess(t *testing.T, name, bin string, args ...string) *agentProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	w := testWriter{t}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &agentProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill sends SIGKILL: no signal handler runs, nothing is flushed.
func (p *agentProcess) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("kill agent: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Error("agent still running 10s after SIGKILL")
	}
}

// spooledSince counts the spool's report files written after t.
func spooledSince(t *testing.T, dir string, since time.Time) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".report") {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().After(since) {
			n++
		}
	}
	return n
}

// The agent is killed with SIGKILL while the collector is down, with the
// resets of the outage still un-acked; a new agent on the same spool starts
// before the collector is back. Every reset is stored exactly once, as the
// kernel's own counter says.
func TestSpoolAgentKilledWhileCollectorDownLosesNothing(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	bin := buildAgent(t)
	db := pgcluster.Database(t)
	addr := freeAddr(t)
	dir := filepath.Join(t.TempDir(), "spool")
	args := []string{"--collector.address", addr, "--node.name", "lab-b", "--netns", lab.B, "--interval", interval.String(),
		"--snapshot.every", "1h", "--evidence.per-second", "1000", "--spool.dir", dir, "--node.credential-file", filepath.Join(filepath.Dir(dir), "node-credential"), "--log.level", "warn",
		"--bpf.pin-dir", "none"} // what a SIGKILL loses without pins: nothing here, as the kill waits for the reports

	col := startCollector(t, db, addr)
	first := startAgentProcess(t, "agent 1", bin, args...)
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)
	lab.ResetNoSocket(t, 10)
	eventually(t, withinTwoIntervals, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 10 {
			return fmt.Sprintf("before the outage: stored %v, want 10", got)
		}
		return ""
	})

	col.stop()
	lab.ResetNoSocket(t, 15)
	// A report written after the resets may have read the kernel's counters
	// while they were still happening; the one after it cannot have, so
	// once two are on disk, all 15 resets are.
	resetsDone := time.Now()
	eventually(t, 10*interval, func() string {
		if n := spooledSince(t, dir, resetsDone); n < 2 {
			return fmt.Sprintf("%d reports spooled since the resets, want 2", n)
		}
		return ""
	})
	first.kill(t)
	if d := lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"]; d != 25 {
		t.Fatalf("nstat TcpOutRsts delta %d, want 25", d)
	}

	startAgentProcess(t, "agent 2", bin, args...)
	time.Sleep(2 * interval) // the new agent replays into a collector that is not there yet
	col = startCollector(t, db, addr)
	eventually(t, 30*time.Second, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 25 {
			return fmt.Sprintf("after the restart: stored %v, want 25", got)
		}
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent"); got != 25 {
			return fmt.Sprintf("after the restart: tcp_reset/sent stored %v, want 25", got)
		}
		return ""
	})
	time.Sleep(3 * interval)
	if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 25 {
		t.Errorf("later: stored %v, want still 25 (no double counting)", got)
	}
	if d := lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"]; d != 25 {
		t.Errorf("nstat TcpOutRsts delta %d, want 25 (the stored total must equal it)", d)
	}

	// Both agents wrote under one instance: the second continued the
	// first's, which is what lets the collector recognise a resend.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var instances, reports int64
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT r.instance_id), count(*) FROM reports r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'lab-b'`).
		Scan(&instances, &reports); err != nil {
		t.Fatal(err)
	}
	if instances != 1 {
		t.Errorf("reports stored under %d instances, want 1", instances)
	}
	t.Logf("%d reports stored", reports)
}

type fakeAgent struct{ hello *nbsv1.Hello }

func (a fakeAgent) Hello() *nbsv1.Hello { return a.hello }
func (a fakeAgent) Definition(id string) (*nbsv1.MetricDefinition, bool) {
	for _, d := range a.hello.GetMetrics() {
		if d.GetId() == id {
			return d, true
		}
	}
	return nil, false
}
func (fakeAgent) ApplyConfig(*nbsv1.Config) {}

// A report the collector would refuse as one message (over 4 MiB, more
// histograms and events than a report may carry) reaches PostgreSQL whole,
// split into parts the real collector accepts, and every part is acked.
func TestSpoolOversizedReportIsSplitAndStored(t *testing.T) {
	t.Parallel()
	db := pgcluster.Database(t)
	col := startCollector(t, db, "127.0.0.1:0")
	const (
		histograms = wire.MaxHistograms + 100
		events     = wire.MaxEvents + 500
		reasons    = 50
	)
	now := time.Now()
	hello := &nbsv1.Hello{NodeName: "big", InstanceId: 7, IntervalMs: 1000, Metrics: []*nbsv1.MetricDefinition{
		{Id: "drops", Title: "drops", Unit: "drops/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE},
		{Id: "latency", Title: "latency", Unit: "s", Kind: nbsv1.MetricKind_METRIC_KIND_GAUGE},
	}}
	r := &nbsv1.Report{TimeUnixNano: now.UnixNano(), IntervalMs: 1000, Snapshot: true,
		Samples: []*nbsv1.Sample{{MetricId: "drops", Value: events, State: nbsv1.State_STATE_CRIT}}}
	for i := range reasons {
		id := fmt.Sprintf("drops/r%02d", i)
		hello.Metrics = append(hello.Metrics, &nbsv1.MetricDefinition{Id: id, Title: id, Unit: "drops/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE})
		r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: id, Value: events / reasons, State: nbsv1.State_STATE_WARN})
	}
	for i := range histograms {
		id := fmt.Sprintf("latency/h%04d", i)
		hello.Metrics = append(hello.Metrics, &nbsv1.MetricDefinition{Id: id, Title: id, Unit: "s", Kind: nbsv1.MetricKind_METRIC_KIND_HISTOGRAM})
		r.Histograms = append(r.Histograms, &nbsv1.Histogram{MetricId: id, BucketIndex: []uint32{1, 2}, BucketCount: []uint64{1, 2}, Count: 3, Sum: 0.5})
	}
	for i := range events {
		r.Events = append(r.Events, &nbsv1.Event{MetricId: fmt.Sprintf("drops/r%02d", i%reasons), TimeUnixNano: now.UnixNano(),
			Fields: map[string]string{"i": strconv.Itoa(i), "detail": strings.Repeat("d", 3000)}})
	}
	if n := proto.Size(r); n <= wire.MaxMessageBytes {
		t.Fatalf("test report is %d bytes, want more than the collector's %d", n, wire.MaxMessageBytes)
	}
	agent := fakeAgent{hello}
	o, err := spool.Open(spool.Options{Dir: t.TempDir(), Node: "big", Describe: agent.Definition, Logger: testLogger(t, "spool")})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	hello.InstanceId = o.Instance()
	o.Add(r)
	parts := o.Len()
	if parts < 2 {
		t.Fatalf("%d parts, want the report split", parts)
	}

	up := uplink.New(uplink.Options{Address: col.grpcAddr}, o, agent, testLogger(t, "uplink"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = up.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	eventually(t, 60*time.Second, func() string {
		if n := o.Len(); n > 0 {
			return fmt.Sprintf("%d of %d parts not acked", n, parts)
		}
		return ""
	})
	if o.Dropped() != 0 {
		t.Errorf("dropped %d entries: a split must lose nothing", o.Dropped())
	}

	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var stored, samples, hists, evs, distinctEvents int64
	q := `SELECT (SELECT count(*) FROM reports r WHERE r.node_id = n.id),
	             (SELECT coalesce(sum(cardinality(metric_ids)), 0) FROM reports r WHERE r.node_id = n.id),
	             (SELECT count(*) FROM histograms h WHERE h.node_id = n.id),
	             (SELECT count(*) FROM events e WHERE e.node_id = n.id),
	             (SELECT count(DISTINCT e.fields->>'i') FROM events e WHERE e.node_id = n.id)
	      FROM nodes n WHERE n.name = 'big'`
	if err := conn.QueryRow(context.Background(), q).Scan(&stored, &samples, &hists, &evs, &distinctEvents); err != nil {
		t.Fatal(err)
	}
	if stored != int64(parts) || samples != reasons+1 || hists != histograms || evs != events || distinctEvents != events {
		t.Fatalf("stored %d reports with %d samples, %d histograms, %d events (%d distinct); want %d, %d, %d, %d, %d",
			stored, samples, hists, evs, distinctEvents, parts, reasons+1, histograms, events, events)
	}
}
