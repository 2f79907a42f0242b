// Package agentcost measures what the agent costs the node it watches: TCP
// throughput through a veth pair of the namespace lab with the real
// nbs-agent binary running (its defaults: every namespace, TX timestamping
// 1 in 64 connections) against not running, measured by iperf3 itself; the
// agent's CPU and peak memory while it runs, idle and under an 8-stream
// load; and what its start costs: its CPU over its first 15 s and its peak
// memory.
//
// The throughput harness treats both sides alike: every run, "on" or
// "off", starts with the same rest (NBS_AGENTCOST_REST seconds from the
// run's start, within which the agent is started and ready for an "on"
// run) and ends with the same cooldown (within which the agent is
// stopped); the iperf3 client and server are pinned to CPUs
// (NBS_AGENTCOST_CPUS, "client,server"); pairs alternate their order
// (off-on, on-off, off-on, ...: ABBA), and the configurations (the default
// agent, and the agent with its triggered per-packet sources attached by an
// operator's expand) take turns pair by pair, so a drift of the machine's
// load falls on every side alike.
//
//	NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1 go test -run '^$' -bench AgentCost -benchtime 1x -timeout 60m ./bench/agentcost/
//
// NBS_AGENTCOST_PAIRS (default 8) on/off pairs of NBS_AGENTCOST_SECONDS
// (default 5) each, of both configurations or of those NBS_AGENTCOST_ONLY
// lists ("default", "triggered", and the default agent with one part taken
// away: "no-rx", "no-tx", "no-rx-tx", "no-bpf"); NBS_AGENTCOST_STARTS (default 3) starts. With
// NBS_AGENTCOST_BASE set to a git revision, the start benchmark also builds
// the agent of that revision and alternates its starts with this one's, for
// a before/after in the same run.
package agentcost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/store"
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
	log   string // its log file
}

// nodeName is the benchmark agent's node.
const nodeName = "cost-1"

// launchAgent starts nbs-agent (with extra flags) and returns once it logs
// that it runs.
func launchAgent(b *testing.B, bin, collector string, extra ...string) *agent {
	b.Helper()
	dir := b.TempDir()
	args := append([]string{"--collector.address", collector, "--node.name", nodeName,
		"--spool.dir", filepath.Join(dir, "spool"), "--node.credential-file", filepath.Join(dir, "credential")}, extra...)
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatalf("start nbs-agent: %v", err)
	}
	a := &agent{cmd: cmd, start: time.Now(), log: logf.Name()}
	b.Cleanup(func() { a.stop(); logf.Close() })
	// Loading the programs and reading BTF takes a few seconds; measure
	// the running agent, not its start.
	if !a.waitLog("agent running", time.Now().Add(30*time.Second)) {
		log, _ := os.ReadFile(a.log)
		b.Fatalf("nbs-agent did not start within 30s:\n%s", log)
	}
	return a
}

// waitLog waits until the agent's log says what, until deadline.
func (a *agent) waitLog(what string, deadline time.Time) bool {
	for {
		log, _ := os.ReadFile(a.log)
		if strings.Contains(string(log), what) {
			return true
		}
		if time.Now().After(deadline) || a.cmd.ProcessState != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// cpus are the CPUs the iperf3 client and server are pinned to
// (NBS_AGENTCOST_CPUS="client,server", default "0,1").
func cpus() (c struct{ client, server int }) {
	c.client, c.server = 0, 1
	if v := os.Getenv("NBS_AGENTCOST_CPUS"); v != "" {
		cl, sv, _ := strings.Cut(v, ",")
		c.client, _ = strconv.Atoi(cl)
		c.server, _ = strconv.Atoi(sv)
	}
	return c
}

// iperfPort is where the iperf3 server listens in B.
const iperfPort = 5201

// iperfServer starts a one-test iperf3 server in B and returns once it
// listens (iperf3's own server may exit after a test, so each test gets one).
func iperfServer(b *testing.B, lab *netlab.Lab) *exec.Cmd {
	srv := exec.Command("ip", "netns", "exec", lab.B, "iperf3", "-s", "-1", "-p", strconv.Itoa(iperfPort), "-B", lab.IPB.String(),
		"-A", strconv.Itoa(cpus().server))
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
	bps, _ := iperfBytes(b, lab, secs, streams)
	return bps
}

// iperfBytes is iperf, with the bytes the receiver got too.
func iperfBytes(b *testing.B, lab *netlab.Lab, secs, streams int) (bps, bytes float64) {
	b.Helper()
	port := strconv.Itoa(iperfPort)
	srv := iperfServer(b, lab)
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Bytes         float64 `json:"bytes"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	for try := 0; ; try++ { // until the server listens
		out, err := exec.Command("ip", "netns", "exec", lab.A, "iperf3", "-c", lab.IPB.String(), "-p", port,
			"-t", strconv.Itoa(secs), "-P", strconv.Itoa(streams), "-J", "-A", strconv.Itoa(cpus().client)).Output()
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
	return res.End.SumReceived.BitsPerSecond, res.End.SumReceived.Bytes
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

// collector is a collector on a throwaway database for the agents to
// report to, with an admin token for its HTTP API.
type collector struct {
	grpcAddr, httpAddr, token string
}

// startCollector runs a collector on a throwaway database.
func startCollector(b *testing.B) collector {
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
	c := collector{token: adminToken(b, cfg.DBURL)}
	c.grpcAddr, c.httpAddr = col.Addrs()
	return c
}

// adminToken makes an admin token with `nbs-collector token create`.
func adminToken(b *testing.B, dbURL string) string {
	var stdout, stderr bytes.Buffer
	cmd := access.TokenCommand{
		Open: func(ctx context.Context, url string) (*pgxpool.Pool, func(), error) {
			st, err := store.Open(ctx, url, slog.New(slog.DiscardHandler))
			if err != nil {
				return nil, nil, err
			}
			return st.Pool(), st.Close, nil
		},
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }, Log: slog.New(slog.DiscardHandler),
	}
	if code := cmd.Run(context.Background(), []string{"create", "--db.url", dbURL, "--name", "agentcost", "--role", "admin", "--expires", "1d"}); code != 0 {
		b.Fatalf("nbs-collector token create: exit %d: %s", code, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// expand asks the collector to have the agent attach its triggered
// sources for secs seconds (an operator's expand); false while the agent's
// stream is not there yet.
func (c collector) expand(b *testing.B, secs int) bool {
	req, err := http.NewRequest(http.MethodPost, "http://"+c.httpAddr+"/api/v1/nodes/"+nodeName+"/expand",
		strings.NewReader(fmt.Sprintf(`{"seconds": %d}`, secs)))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("expand: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusAccepted
}

// costConfig is one agent configuration measured against no agent.
type costConfig struct {
	key   string // its name in NBS_AGENTCOST_ONLY and the reported metrics
	name  string
	flags []string
	// triggered: the run expands the node and waits for the triggered
	// sources to attach before its rest ends.
	triggered bool
	rest      time.Duration
}

// costConfigs are the configurations the harness knows, by the name
// NBS_AGENTCOST_ONLY selects them with. "default" and "triggered" are the
// goals; the others take one part of the default agent away each, so that
// what the default agent costs can be told apart in one run.
func costConfigs(rest time.Duration) map[string]costConfig {
	return map[string]costConfig{
		"default": {name: "default agent", rest: rest},
		// The default interval, as a node runs them: at a shorter one (under
		// 5 s) the run-time statistics stay on for good and every program's
		// run pays two more clock reads, which is a cost of the interval and
		// not of the sources. So the rest is long enough for an expand to
		// reach the agent and attach them at its next collection. The budget
		// is raised so the per-packet programs stay attached under iperf3's
		// load (at the default 1% they would be detached).
		"triggered": {name: "triggered sources attached", flags: []string{"--overhead.budget", "100"},
			triggered: true, rest: rest + 18*time.Second},
		"no-rx":    {name: "default agent without always-on RX latency", flags: []string{"--latency.rx.always=false"}, rest: rest},
		"no-tx":    {name: "default agent without TX timestamping", flags: []string{"--tx-timestamping.sample", "0"}, rest: rest},
		"no-rx-tx": {name: "default agent without RX latency and TX timestamping", flags: []string{"--latency.rx.always=false", "--tx-timestamping.sample", "0"}, rest: rest},
		"no-bpf":   {name: "agent without BPF (/proc only)", flags: []string{"--bpf=false"}, rest: rest},
	}
}

// selectConfigs turns NBS_AGENTCOST_ONLY (a comma-separated list of
// costConfigs' names; empty: default and triggered) into the
// configurations to run, in the order given.
func selectConfigs(only string, rest time.Duration) ([]costConfig, error) {
	known := costConfigs(rest)
	if only == "" {
		only = "default,triggered"
	}
	var out []costConfig
	for name := range strings.SplitSeq(only, ",") {
		cfg, ok := known[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("NBS_AGENTCOST_ONLY: unknown configuration %q (known: %s)", name, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		cfg.key = strings.TrimSpace(name)
		out = append(out, cfg)
	}
	return out, nil
}

// ratios are one configuration's on/off throughput pairs.
type ratios struct{ on, off, r []float64 }

func (r ratios) summary() (lo, med, hi float64, below int) {
	s := slices.Sorted(slices.Values(r.r))
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	for _, x := range s {
		if x < 1 {
			below++
		}
	}
	return s[0], med, s[len(s)-1], below
}

func BenchmarkAgentCost(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		netlab.SkipOrFail(b, "iperf3 is not installed")
	}
	bin := buildAgent(b)
	col := startCollector(b)
	lab := netlab.New(b)
	pairs, secs := envInt("NBS_AGENTCOST_PAIRS", 8), envInt("NBS_AGENTCOST_SECONDS", 5)
	rest := time.Duration(envInt("NBS_AGENTCOST_REST", 8)) * time.Second
	const cooldown = 3 * time.Second
	configs, err := selectConfigs(os.Getenv("NBS_AGENTCOST_ONLY"), rest)
	if err != nil {
		b.Fatal(err)
	}

	// run is one measurement. Both sides rest alike: the agent starts
	// (and, triggered, attaches) within the rest an "off" run spends idle,
	// and stops within the cooldown.
	var busyCPU, wall time.Duration
	peak := 0
	run := func(cfg costConfig, on bool) float64 {
		t0 := time.Now()
		var a *agent
		if on {
			a = launchAgent(b, bin, col.grpcAddr, cfg.flags...)
			if cfg.triggered {
				for !col.expand(b, secs+int(cfg.rest/time.Second)+30) {
					if time.Since(t0) > cfg.rest {
						b.Fatalf("%s: the collector does not know the agent's stream after %s", cfg.name, cfg.rest)
					}
					time.Sleep(50 * time.Millisecond)
				}
				if !a.waitLog("triggered source attached", t0.Add(cfg.rest)) {
					b.Fatalf("%s: no triggered source attached within the rest (%s): raise NBS_AGENTCOST_REST", cfg.name, cfg.rest)
				}
			}
			if d := time.Since(t0); d > cfg.rest {
				b.Fatalf("%s: the agent took %s to be ready, more than the rest (%s): raise NBS_AGENTCOST_REST", cfg.name, d, cfg.rest)
			}
		}
		time.Sleep(time.Until(t0.Add(cfg.rest)))
		var c0 time.Duration
		if on {
			c0 = a.cpu(b)
		}
		t1 := time.Now()
		bps := iperf(b, lab, secs, 1)
		if on {
			busyCPU += a.cpu(b) - c0
			wall += time.Since(t1)
			peak = max(peak, a.peakKiB(b))
		}
		t2 := time.Now()
		if on {
			a.stop()
		}
		time.Sleep(time.Until(t2.Add(cooldown)))
		return bps
	}

	for range b.N {
		results := make([]ratios, len(configs))
		for i := range pairs {
			for k, cfg := range configs {
				r := &results[k]
				// ABBA: off-on, on-off, off-on, ...
				if i%2 == 0 {
					r.off = append(r.off, run(cfg, false))
					r.on = append(r.on, run(cfg, true))
				} else {
					r.on = append(r.on, run(cfg, true))
					r.off = append(r.off, run(cfg, false))
				}
				r.r = append(r.r, r.on[i]/r.off[i])
			}
		}
		c := cpus()
		for k, cfg := range configs {
			r := results[k]
			lo, med, hi, below := r.summary()
			b.Logf("%s: single-stream throughput on/off over %d ABBA pairs of %d s (rest %s before each run, %s after; iperf3 client on CPU %d, server on CPU %d): median %.3f (min %.3f, max %.3f), %d of %d pairs below 1; ratios %s; on %v Gbit/s, off %v Gbit/s",
				cfg.name, pairs, secs, cfg.rest, cooldown, c.client, c.server, med, lo, hi, below, pairs, list3(r.r), gbits(r.on), gbits(r.off))
			b.ReportMetric(med, cfg.key+"_on/off_median")
			b.ReportMetric(lo, cfg.key+"_on/off_min")
			b.ReportMetric(hi, cfg.key+"_on/off_max")
		}

		// The agent idle and under 8 streams, for its CPU and memory.
		a := launchAgent(b, bin, col.grpcAddr)
		time.Sleep(rest)
		c0, t0 := a.cpu(b), time.Now()
		time.Sleep(time.Duration(secs) * time.Second)
		idleCPU := float64(a.cpu(b)-c0) / float64(time.Since(t0))
		idlePeak := a.peakKiB(b)
		c0, t0 = a.cpu(b), time.Now()
		bps8 := iperf(b, lab, secs, 8)
		loadCPU := float64(a.cpu(b)-c0) / float64(time.Since(t0))
		peak8 := a.peakKiB(b)
		a.stop()
		b.Logf("agent CPU: %.2f%% of a core under the single-stream load, %.2f%% idle, %.2f%% under 8 streams (%.1f Gbit/s); peak RSS %d KiB (single stream), %d KiB idle, %d KiB with 8 streams",
			100*float64(busyCPU)/float64(wall), 100*idleCPU, 100*loadCPU, bps8/1e9, peak, idlePeak, peak8)
		b.ReportMetric(100*loadCPU, "cpu%_8streams")
		b.ReportMetric(float64(max(peak, peak8))/1024, "peak_MiB")
	}
}

func list3(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(out, ", ")
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
	grpcAddr := startCollector(b).grpcAddr
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
