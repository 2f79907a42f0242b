// Package agentcost measures what the agent costs the node it watches: TCP
// throughput through a veth pair of the namespace lab with the real
// nbs-agent binary running (its defaults: every namespace, TX timestamping
// 1 in 64 connections) against not running, in interleaved runs, measured
// by iperf3 itself; the agent's CPU and peak memory while it runs, idle
// and under an 8-stream load; and what its start costs: its CPU over its
// first 15 s and its peak memory.
//
//	NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1 go test -run '^$' -bench . -benchtime 1x -timeout 20m ./bench/agentcost/
//
// NBS_AGENTCOST_PAIRS (default 6) on/off pairs of NBS_AGENTCOST_SECONDS
// (default 3) each; NBS_AGENTCOST_STARTS (default 3) starts. With
// NBS_AGENTCOST_BASE set to a git revision, the start benchmark also builds
// the agent of that revision and alternates its starts with this one's, for
// a before/after in the same run.
package agentcost

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/procstatus"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// agent is a running nbs-agent process.
type agent struct {
	cmd   *exec.Cmd
	start time.Time
}

func startAgent(b *testing.B, bin, collector string) *agent {
	b.Helper()
	a := launchAgent(b, bin, collector)
	time.Sleep(2 * time.Second)
	return a
}

// launchAgent starts nbs-agent and returns once it logs that it runs.
func launchAgent(b *testing.B, bin, collector string) *agent {
	b.Helper()
	dir := b.TempDir()
	cmd := exec.Command(bin, "--collector.address", collector, "--node.name", "cost-1",
		"--spool.dir", filepath.Join(dir, "spool"), "--node.credential-file", filepath.Join(dir, "credential"))
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatalf("start nbs-agent: %v", err)
	}
	a := &agent{cmd: cmd, start: time.Now()}
	b.Cleanup(func() { a.stop(); logf.Close() })
	// Loading the programs and reading BTF takes a few seconds; measure
	// the running agent, not its start.
	deadline := time.Now().Add(30 * time.Second)
	for {
		log, _ := os.ReadFile(logf.Name())
		if strings.Contains(string(log), "agent running") {
			break
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			b.Fatalf("nbs-agent did not start within 30s:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a
}

func (a *agent) stop() {
	if a.cmd.ProcessState == nil {
		_ = a.cmd.Process.Signal(os.Interrupt)
		_ = a.cmd.Wait()
	}
	// An agent that pins (where bpffs is mounted) leaves its programs
	// counting; an "off" run must have none. Older agents pin nothing.
	_ = os.RemoveAll("/sys/fs/bpf/nbs/cost-1")
}

// cpu is the agent's user+system time so far.
func (a *agent) cpu(b *testing.B) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// peakKiB is the agent's peak resident memory (VmHWM).
func (a *agent) peakKiB(b *testing.B) int { return a.statusKiB(b, "VmHWM") }

// statusKiB is one of the agent's memory figures in /proc/<pid>/status.
func (a *agent) statusKiB(b *testing.B, field string) int {
	n, err := procstatus.KiB(a.cmd.Process.Pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// iperfPort is where the iperf3 server listens in B.
const iperfPort = 5201

// iperfServer starts a one-test iperf3 server in B and returns once it
// listens (iperf3's own server may exit after a test, so each test gets one).
func iperfServer(b *testing.B, lab *netlab.Lab) *exec.Cmd {
	srv := exec.Command("ip", "netns", "exec", lab.B, "iperf3", "-s", "-1", "-p", strconv.Itoa(iperfPort), "-B", lab.IPB.String())
	if err := srv.Start(); err != nil {
		b.Fatalf("iperf3 server: %v", err)
	}
	for try := 0; ; try++ {
		out, _ := exec.Command("ip", "netns", "exec", lab.B, "ss", "-Htln", "sport", "= :"+strconv.Itoa(iperfPort)).Output()
		if strings.TrimSpace(string(out)) != "" {
			return srv
		}
		if try == 100 {
			_ = srv.Process.Kill()
			_ = srv.Wait()
			b.Fatal("iperf3 server does not listen after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// iperf runs iperf3 from A to B for secs seconds with streams streams and
// returns the receiver's bits per second.
func iperf(b *testing.B, lab *netlab.Lab, secs, streams int) float64 {
	b.Helper()
	port := strconv.Itoa(iperfPort)
	srv := iperfServer(b, lab)
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	for try := 0; ; try++ { // until the server listens
		out, err := exec.Command("ip", "netns", "exec", lab.A, "iperf3", "-c", lab.IPB.String(), "-p", port,
			"-t", strconv.Itoa(secs), "-P", strconv.Itoa(streams), "-J").Output()
		if jerr := json.Unmarshal(out, &res); jerr != nil {
			b.Fatalf("iperf3: %v, output %v: %.300s", err, jerr, out)
		}
		if res.Error == "" && res.End.SumReceived.BitsPerSecond > 0 {
			break
		}
		if try == 20 || !strings.Contains(res.Error, "refused") {
			b.Fatalf("iperf3: %v: %s", err, res.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return res.End.SumReceived.BitsPerSecond
}

// buildAgent builds nbs-agent from this tree.
func buildAgent(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "nbs-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nbs-project/nbs/agent/cmd/nbs-agent").CombinedOutput(); err != nil {
		b.Fatalf("build nbs-agent: %v\n%s", err, out)
	}
	return bin
}

// buildAgentAt builds nbs-agent as it was at a git revision, from an
// export of that revision's tree.
func buildAgentAt(b *testing.B, rev string) string {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		b.Fatalf("find the repository: %v", err)
	}
	src := b.TempDir()
	tar := filepath.Join(b.TempDir(), "src.tar")
	if out, err := exec.Command("git", "-C", strings.TrimSpace(string(top)), "archive", "-o", tar, rev).CombinedOutput(); err != nil {
		b.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tar, "-C", src).CombinedOutput(); err != nil {
		b.Fatalf("unpack %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(b.TempDir(), "nbs-agent-base")
	build := exec.Command("go", "build", "-o", bin, "./agent/cmd/nbs-agent")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build nbs-agent at %s: %v\n%s", rev, err, out)
	}
	return bin
}

// startCollector runs a collector on a throwaway database for the agents
// to report to, and returns its gRPC address.
func startCollector(b *testing.B) string {
	cfg := collectorapp.DefaultConfig()
	cfg.DBURL, cfg.GRPCAddr, cfg.HTTPAddr = pgcluster.Database(b), "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	col := collectorapp.New(cfg, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- col.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	select {
	case <-col.Ready():
	case err := <-done:
		b.Fatalf("collector: %v", err)
	}
	grpcAddr, _ := col.Addrs()
	return grpcAddr
}

func BenchmarkAgentCost(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		netlab.SkipOrFail(b, "iperf3 is not installed")
	}
	bin := buildAgent(b)
	grpcAddr := startCollector(b)
	lab := netlab.New(b)
	pairs, secs := envInt("NBS_AGENTCOST_PAIRS", 6), envInt("NBS_AGENTCOST_SECONDS", 3)

	for range b.N {
		var ratios []float64
		var on, off []float64
		var busyCPU, wall time.Duration
		peak := 0
		for i := range pairs {
			measureOn := func() {
				a := startAgent(b, bin, grpcAddr)
				c0, t0 := a.cpu(b), time.Now()
				on = append(on, iperf(b, lab, secs, 1))
				busyCPU += a.cpu(b) - c0
				wall += time.Since(t0)
				peak = max(peak, a.peakKiB(b))
				a.stop()
			}
			measureOff := func() { off = append(off, iperf(b, lab, secs, 1)) }
			// Alternate which goes first, so a drift of the machine's load
			// falls on both sides alike.
			if i%2 == 0 {
				measureOff()
				measureOn()
			} else {
				measureOn()
				measureOff()
			}
			ratios = append(ratios, on[i]/off[i])
		}
		// The agent idle and under 8 streams, for its CPU and memory.
		a := startAgent(b, bin, grpcAddr)
		c0, t0 := a.cpu(b), time.Now()
		time.Sleep(time.Duration(secs) * time.Second)
		idleCPU := float64(a.cpu(b)-c0) / float64(time.Since(t0))
		idlePeak := a.peakKiB(b)
		c0, t0 = a.cpu(b), time.Now()
		bps8 := iperf(b, lab, secs, 8)
		loadCPU := float64(a.cpu(b)-c0) / float64(time.Since(t0))
		peak8 := a.peakKiB(b)
		a.stop()

		slices.Sort(ratios)
		med := ratios[len(ratios)/2]
		if len(ratios)%2 == 0 {
			med = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
		}
		b.Logf("single-stream throughput, agent on/off over %d interleaved pairs of %d s: median %.3f (min %.3f, max %.3f); on %v Gbit/s, off %v Gbit/s",
			pairs, secs, med, ratios[0], ratios[len(ratios)-1], gbits(on), gbits(off))
		b.Logf("agent CPU: %.2f%% of a core under the single-stream load, %.2f%% idle, %.2f%% under 8 streams (%.1f Gbit/s); peak RSS %d KiB (single stream), %d KiB idle, %d KiB with 8 streams",
			100*float64(busyCPU)/float64(wall), 100*idleCPU, 100*loadCPU, bps8/1e9, peak, idlePeak, peak8)
		b.ReportMetric(med, "on/off_median")
		b.ReportMetric(ratios[0], "on/off_min")
		b.ReportMetric(ratios[len(ratios)-1], "on/off_max")
		b.ReportMetric(100*loadCPU, "cpu%_8streams")
		b.ReportMetric(float64(max(peak, peak8))/1024, "peak_MiB")
	}
}

func gbits(bps []float64) []string {
	out := make([]string, len(bps))
	for i, v := range bps {
		out[i] = strconv.FormatFloat(v/1e9, 'f', 2, 64)
	}
	return out
}

// startWindow is how long a start is measured from the process's launch.
const startWindow = 15 * time.Second

// BenchmarkAgentStart measures what starting the agent costs: its CPU
// (user+system) over its first 15 s, which loading the programs and
// reading kernel BTF dominate, its peak resident memory (VmHWM) when it
// reports that it runs and at 15 s, and its resident memory then.
func BenchmarkAgentStart(b *testing.B) {
	type build struct {
		name, bin string
	}
	builds := []build{{"this tree", buildAgent(b)}}
	if rev := os.Getenv("NBS_AGENTCOST_BASE"); rev != "" {
		builds = append(builds, build{rev, buildAgentAt(b, rev)})
	}
	grpcAddr := startCollector(b)
	starts := envInt("NBS_AGENTCOST_STARTS", 3)
	type result struct{ cpu, runningPeak, peak, rss []float64 }
	for range b.N {
		results := make([]result, len(builds))
		for i := range starts {
			for j := range builds {
				// Alternate which build goes first, as the throughput
				// pairs do.
				k := (j + i) % len(builds)
				a := launchAgent(b, builds[k].bin, grpcAddr)
				running := a.peakKiB(b)
				time.Sleep(time.Until(a.start.Add(startWindow)))
				r := &results[k]
				r.cpu = append(r.cpu, 100*float64(a.cpu(b))/float64(startWindow))
				r.runningPeak = append(r.runningPeak, float64(running)/1024)
				r.peak = append(r.peak, float64(a.peakKiB(b))/1024)
				r.rss = append(r.rss, float64(a.statusKiB(b, "VmRSS"))/1024)
				a.stop()
			}
		}
		for k, r := range results {
			b.Logf("%s, %d starts: CPU over the first %s %s%% of a core; peak RSS when running %s MiB, at %s %s MiB; RSS then %s MiB",
				builds[k].name, starts, startWindow, list(r.cpu), list(r.runningPeak), startWindow, list(r.peak), list(r.rss))
		}
		r := results[0]
		b.ReportMetric(slices.Max(r.peak), "peak_MiB")
		b.ReportMetric(slices.Max(r.cpu), "cpu%_15s_max")
	}
}

func list(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(out, ", ")
}
