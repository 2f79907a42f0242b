// Package agentcost measures what the agent costs the node it watches: TCP
// throughput through a veth pair of the namespace lab with the real
// nbs-agent binary running (its defaults: every namespace, TX timestamping
// 1 in 64 connections) against not running, measured by iperf3 itself; the
// BPF time of all its programs per MB moved, which does not depend on the
// machine's load; its CPU and peak memory idle and under a 10 Gbit/s
// stream (BenchmarkAgentIdle); and what its start costs.
//
// The throughput harness treats both sides alike: every run, "on" or
// "off", starts with the same rest (NBS_AGENTCOST_REST seconds, default 20;
// 10 more for the triggered configuration) and ends with the same cooldown.
// Within an "on" run's rest the agent starts, its first report is stored
// and acked by the collector (in this process, with PostgreSQL) and,
// triggered, an expand attaches its triggered sources; all of that must be
// over NBS_AGENTCOST_QUIET seconds (default 4) before the timed window, so
// the window holds the running agent only, and the machine's busy CPU over
// that quiet end of the rest is reported for both sides. Every agent has a
// node name and pin directory of its own (nothing shared between runs or
// with another benchmark). The iperf3 client and server are pinned to CPUs
// (NBS_AGENTCOST_CPUS, "client,server"); pairs alternate their order
// (off-on, on-off, ...: ABBA), and the configurations take turns pair by
// pair, so a drift of the machine's load falls on every side alike. Each
// configuration reports the geometric mean of its pairs' on/off ratios
// with a 95% bootstrap interval over ABBA blocks, their spread, and its
// agent's CPU and peak memory apart from the others'.
//
//	NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1 go test -run '^$' -bench AgentCost -benchtime 1x -timeout 60m ./bench/agentcost/
//
// NBS_AGENTCOST_PAIRS (default 12) on/off pairs of NBS_AGENTCOST_SECONDS
// (default 8) each, of both configurations or of those NBS_AGENTCOST_ONLY
// lists ("default", "triggered", and the default agent with one part taken
// away: "no-rx", "no-tx", "no-rx-tx", "no-bpf"); then NBS_AGENTCOST_BPFRUNS
// (default 2) runs of each with run-time statistics on for BPF ns per MB.
// NBS_AGENTCOST_STARTS (default 3) starts. With NBS_AGENTCOST_BASE set to a
// git revision (or the path of an agent binary), the start, idle and
// program benchmarks also measure that agent, alternated with this tree's,
// for a before/after in the same run.
package agentcost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/collector/access"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/cgroupv2"
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
	// node is its node name, unique to this launch: two agents (of this
	// benchmark, or of another running beside it) never share a stream at
	// the collector or a pin directory.
	node string
	// cgroup is the cgroup v2 directory the agent was started in, alone
	// (see cpu); "" where there is no cgroup v2.
	cgroup string
}

// pinRoot is where the agent pins by default (app.DefaultPinRoot), by node.
const pinRoot = "/sys/fs/bpf/nbs"

// launchAgent starts nbs-agent (with extra flags) under a node name of its
// own and returns once it logs that it runs.
func launchAgent(b *testing.B, bin, collector string, extra ...string) *agent {
	b.Helper()
	dir := b.TempDir()
	node := "cost-" + netlab.RandHex(8)
	args := append([]string{"--collector.address", collector, "--node.name", node,
		"--spool.dir", filepath.Join(dir, "spool"), "--node.credential-file", filepath.Join(dir, "credential")}, extra...)
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cg, cgFD := agentCgroup(b, node)
	if cg != "" {
		// Born in its cgroup (clone3's CLONE_INTO_CGROUP): every thread it
		// ever has is counted from its first instruction.
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgFD}
	}
	err = cmd.Start()
	if cg != "" {
		unix.Close(cgFD)
	}
	if err != nil {
		b.Fatalf("start nbs-agent: %v", err)
	}
	a := &agent{cmd: cmd, start: time.Now(), log: logf.Name(), node: node, cgroup: cg}
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

// stop stops the agent and removes what it pinned: its own pin directory
// only (an agent that pins where bpffs is mounted leaves its programs
// counting, and an "off" run must have none; older agents pin nothing).
func (a *agent) stop() {
	if a.cmd.ProcessState == nil {
		_ = a.cmd.Process.Signal(os.Interrupt)
		_ = a.cmd.Wait()
	}
	_ = os.RemoveAll(filepath.Join(pinRoot, a.node))
	if a.cgroup != "" {
		// The cgroup empties once the reaped agent's threads are gone,
		// which can trail Wait by a moment.
		for range 50 {
			if err := unix.Rmdir(a.cgroup); err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// agentCgroup makes an empty cgroup v2 directory for one agent and opens
// it (for SysProcAttr.CgroupFD); "" if there is no cgroup v2 to do it in.
func agentCgroup(b *testing.B, node string) (string, int) {
	root, err := cgroupv2.Root()
	if err != nil {
		b.Logf("agent CPU counted in 10 ms ticks: %v", err)
		return "", -1
	}
	dir := filepath.Join(root, "nbs-agentcost-"+node)
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Logf("agent CPU counted in 10 ms ticks: %v", err)
		return "", -1
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(dir)
		b.Logf("agent CPU counted in 10 ms ticks: %v", err)
		return "", -1
	}
	return dir, fd
}

// cpu is the agent's CPU time so far. Counted by its own cgroup v2's
// cpu.stat usage_usec: the scheduler's run time (ns, shown in µs) of
// every thread the agent ever had, those that exited included, from its
// first instruction. /proc/<pid>/stat counts in 10 ms ticks (0.008% of a
// core over 120 s: too coarse near a 0.1% goal) and per-thread schedstat
// loses the threads that exited; wait4's rusage is exact but only once,
// at the end, so it cannot leave the agent's start out of the window.
// Without cgroup v2, the ticks.
func (a *agent) cpu(b *testing.B) time.Duration {
	if a.cgroup != "" {
		return cgroupCPU(b, a.cgroup)
	}
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

// cgroupCPU is usage_usec of a cgroup v2's cpu.stat.
func cgroupCPU(b *testing.B, dir string) time.Duration {
	raw, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("%s/cpu.stat: usage_usec %q: %v", dir, v, err)
			}
			return time.Duration(us) * time.Microsecond
		}
	}
	b.Fatalf("%s/cpu.stat has no usage_usec:\n%s", dir, raw)
	return 0
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

// iperfArgs is iperf with more iperf3 client arguments (e.g. "-b", "10G").
func iperfArgs(b *testing.B, lab *netlab.Lab, secs, streams int, extra ...string) float64 {
	b.Helper()
	bps, _ := iperfBytes(b, lab, secs, streams, extra...)
	return bps
}

// iperfBytes is iperf, with the bytes the receiver got too.
func iperfBytes(b *testing.B, lab *netlab.Lab, secs, streams int, extra ...string) (bps, bytes float64) {
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
		args := append([]string{"netns", "exec", lab.A, "iperf3", "-c", lab.IPB.String(), "-p", port,
			"-t", strconv.Itoa(secs), "-P", strconv.Itoa(streams), "-J", "-A", strconv.Itoa(cpus().client)}, extra...)
		out, err := exec.Command("ip", args...).Output()
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
// export of that revision's tree; a path to an executable file is taken as
// the agent itself (built once for several runs, or a wrapper setting its
// environment).
func buildAgentAt(b *testing.B, rev string) string {
	if fi, err := os.Stat(rev); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return rev
	}
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

// startCollector runs a collector on a throwaway database; adjust, if
// given, changes its configuration.
func startCollector(b *testing.B, adjust ...func(*collectorapp.Config)) collector {
	cfg := collectorapp.DefaultConfig()
	for _, f := range adjust {
		f(&cfg)
	}
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

// expand asks the collector to have node's agent attach its triggered
// sources for secs seconds (an operator's expand); false while the agent's
// stream is not there yet.
func (c collector) expand(b *testing.B, node string, secs int) bool {
	req, err := http.NewRequest(http.MethodPost, "http://"+c.httpAddr+"/api/v1/nodes/"+node+"/expand",
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

// reported says whether the collector has stored (and so acked) a report
// of node's.
func (c collector) reported(b *testing.B, node string) bool {
	req, err := http.NewRequest(http.MethodGet, "http://"+c.httpAddr+"/api/v1/nodes/"+node, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("node %s: %v", node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false // no Hello yet
	}
	var n struct {
		LastReport *time.Time `json:"last_report"`
	}
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("node %s: HTTP %d", node, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		b.Fatalf("node %s: %v", node, err)
	}
	return n.LastReport != nil
}

// ready brings a launched agent of cfg to the state its timed window
// measures: its first report acked by the collector and, triggered, its
// triggered sources attached by an expand. It fails the benchmark past
// deadline (the end of the rest, less the quiet that must follow).
func (c collector) ready(b *testing.B, a *agent, cfg costConfig, expandSecs int, deadline time.Time) {
	b.Helper()
	if cfg.triggered {
		for !c.expand(b, a.node, expandSecs) {
			if time.Now().After(deadline) {
				b.Fatalf("%s: the collector does not know the agent's stream before the rest's quiet part: raise NBS_AGENTCOST_REST", cfg.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !a.waitLog("triggered source attached", deadline) {
			b.Fatalf("%s: no triggered source attached before the rest's quiet part: raise NBS_AGENTCOST_REST", cfg.name)
		}
	}
	for !c.reported(b, a.node) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: no report of the agent's acked before the rest's quiet part: raise NBS_AGENTCOST_REST", cfg.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
// what the default agent costs can be told apart in one run. rest is the
// rest before every run of the default agent: its start and its first
// report (at its first interval, 10 s) fit in it with the quiet after.
func costConfigs(rest time.Duration) map[string]costConfig {
	return map[string]costConfig{
		"default": {name: "default agent", rest: rest},
		// The default interval, as a node runs them: at a shorter one (under
		// 5 s) the run-time statistics stay on for good and every program's
		// run pays two more clock reads, which is a cost of the interval and
		// not of the sources. The expand reaches the agent before its first
		// collection, which attaches them; the longer rest is for a start
		// slow enough to miss it. The budget is raised so the per-packet
		// programs stay attached under iperf3's load (at the default 1% they
		// would be detached).
		"triggered": {name: "triggered sources attached", flags: []string{"--overhead.budget", "100"},
			triggered: true, rest: rest + 10*time.Second},
		"no-rx":    {name: "default agent without always-on RX latency", flags: []string{"--latency.rx.always=false"}, rest: rest},
		"no-tx":    {name: "default agent without TX timestamping", flags: []string{"--tx-timestamping.sample", "0"}, rest: rest},
		"no-rx-tx": {name: "default agent without RX latency and TX timestamping", flags: []string{"--latency.rx.always=false", "--tx-timestamping.sample", "0"}, rest: rest},
		"no-bpf":   {name: "agent without BPF (/proc only)", flags: []string{"--bpf=false"}, rest: rest},
		"no-dns":   {name: "default agent without the DNS programs", flags: []string{"--dns.always=false"}, rest: rest},
		"no-flows": {name: "default agent without the flow map", flags: []string{"--flows.enable=false"}, rest: rest},
		// At an interval under 5 s the run-time statistics stay on for
		// good: beside "default" (on a tenth of the time) it prices them.
		"stats-on": {name: "default agent, run-time statistics always on (4 s interval)", flags: []string{"--interval", "4s"}, rest: rest},
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

// side is what one configuration's runs of one side ("on" or "off")
// measured.
type side struct {
	bps []float64
	// restBusy is the machine's busy share of its CPUs over each run's
	// quiet (the end of its rest): the two sides must rest alike.
	restBusy []float64
}

// cfgResult is one configuration's pairs and what its agent cost.
type cfgResult struct {
	on, off side
	r       []float64 // on/off of each pair, in order (ABBA)
	// The agent's CPU and wall time over the timed windows, its peak RSS,
	// and this process's (the collector's) CPU over them.
	agentCPU, wall, collectorCPU time.Duration
	peakKiB                      int
}

func BenchmarkAgentCost(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		netlab.SkipOrFail(b, "iperf3 is not installed")
	}
	bin := buildAgent(b)
	col := startCollector(b)
	lab := netlab.New(b)
	pairs, secs := envInt("NBS_AGENTCOST_PAIRS", 12), envInt("NBS_AGENTCOST_SECONDS", 8)
	rest := time.Duration(envInt("NBS_AGENTCOST_REST", 20)) * time.Second
	quiet := time.Duration(envInt("NBS_AGENTCOST_QUIET", 4)) * time.Second
	bpfRuns := envInt("NBS_AGENTCOST_BPFRUNS", 2)
	const cooldown = 3 * time.Second
	configs, err := selectConfigs(os.Getenv("NBS_AGENTCOST_ONLY"), rest)
	if err != nil {
		b.Fatal(err)
	}

	// run is one measurement. Both sides rest alike: the agent starts,
	// has its first report acked (the collector and PostgreSQL have stored
	// it) and, triggered, attaches its triggered sources within the rest
	// an "off" run spends idle, and nothing of that may come later than
	// quiet before the timed window; it stops within the cooldown.
	run := func(cfg costConfig, res *cfgResult, on bool) {
		t0 := time.Now()
		window := t0.Add(cfg.rest)
		var a *agent
		if on {
			a = launchAgent(b, bin, col.grpcAddr, cfg.flags...)
			col.ready(b, a, cfg, secs+int(cfg.rest/time.Second)+60, window.Add(-quiet))
		}
		time.Sleep(time.Until(window.Add(-quiet)))
		m0 := machineCPU(b)
		time.Sleep(time.Until(window))
		busy := machineCPU(b).busySince(m0)
		var c0, s0 time.Duration
		if on {
			c0, s0 = a.cpu(b), selfCPU(b)
		}
		t1 := time.Now()
		bps := iperf(b, lab, secs, 1)
		sd := &res.off
		if on {
			res.agentCPU += a.cpu(b) - c0
			res.collectorCPU += selfCPU(b) - s0
			res.wall += time.Since(t1)
			res.peakKiB = max(res.peakKiB, a.peakKiB(b))
			sd = &res.on
		}
		sd.bps = append(sd.bps, bps)
		sd.restBusy = append(sd.restBusy, busy)
		t2 := time.Now()
		if on {
			a.stop()
		}
		time.Sleep(time.Until(t2.Add(cooldown)))
	}

	for range b.N {
		b.Logf("load average at the start: %s", loadavg())
		results := make([]cfgResult, len(configs))
		for i := range pairs {
			for k, cfg := range configs {
				r := &results[k]
				// ABBA: off-on, on-off, off-on, ...
				if i%2 == 0 {
					run(cfg, r, false)
					run(cfg, r, true)
				} else {
					run(cfg, r, true)
					run(cfg, r, false)
				}
				r.r = append(r.r, r.on.bps[i]/r.off.bps[i])
			}
		}
		b.Logf("load average after the pairs: %s", loadavg())
		c := cpus()
		for k, cfg := range configs {
			r := results[k]
			st := pairStats(r.r)
			b.Logf("%s: single-stream throughput on/off over %d ABBA pairs of %d s (rest %s before each run, the last %s of it quiet, %s after; iperf3 client on CPU %d, server on CPU %d): "+
				"geometric mean %.4f, 95%% bootstrap CI over ABBA blocks %.4f–%.4f (±%.2f%%); median %.4f, quartiles %.4f–%.4f, min %.4f, max %.4f; %d of %d pairs below 1; ratios %s; on %v Gbit/s, off %v Gbit/s",
				cfg.name, pairs, secs, cfg.rest, quiet, cooldown, c.client, c.server,
				st.geomean, st.lo, st.hi, 100*(st.hi-st.lo)/2, st.median, st.q1, st.q3, st.min, st.max, st.below, pairs, list3(r.r), gbits(r.on.bps), gbits(r.off.bps))
			b.Logf("%s: the machine's CPUs busy over the quiet end of the rest: on %s%%, off %s%% (median %.1f%% / %.1f%%); agent CPU %.2f%% of a core under one stream, peak RSS %.1f MiB; this process (the collector) %.2f%% of a core over the windows",
				cfg.name, list(pct(r.on.restBusy)), list(pct(r.off.restBusy)), 100*bpfstats.Median(r.on.restBusy), 100*bpfstats.Median(r.off.restBusy),
				100*float64(r.agentCPU)/float64(r.wall), float64(r.peakKiB)/1024, 100*float64(r.collectorCPU)/float64(r.wall))
			// Pairs resolve a 1% cost only on a machine otherwise idle.
			if busy := slices.Concat(r.on.restBusy, r.off.restBusy); bpfstats.Median(busy) > 0.25 {
				b.Logf("%s: the machine was busy over the median rest (%.0f%% of its CPUs): other work's drift, not the agent, sets these pairs' spread; BPF ns per MB below does not depend on it",
					cfg.name, 100*bpfstats.Median(busy))
			}
			b.ReportMetric(st.geomean, cfg.key+"_on/off_geomean")
			b.ReportMetric(st.lo, cfg.key+"_on/off_ci_lo")
			b.ReportMetric(st.hi, cfg.key+"_on/off_ci_hi")
			b.ReportMetric(st.median, cfg.key+"_on/off_median")
			b.ReportMetric(100*float64(r.agentCPU)/float64(r.wall), cfg.key+"_cpu%_1stream")
			b.ReportMetric(float64(r.peakKiB)/1024, cfg.key+"_peak_MiB")
		}

		// The deterministic companion: what the agent's BPF programs
		// spend per MB the stream moved, from the kernel's run-time
		// statistics (held on over these runs only: they add two clock
		// reads to every run, so the throughput pairs run without them).
		for _, cfg := range configs {
			var perMB, runsPerMB []float64
			for range bpfRuns {
				ns, runs, mb := bpfPerMB(b, col, lab, bin, cfg, secs, quiet)
				perMB, runsPerMB = append(perMB, ns/mb), append(runsPerMB, runs/mb)
			}
			b.Logf("%s: BPF ns per MB received %s (runs per MB %s), all the agent's programs, %d runs of %d s with run-time statistics on",
				cfg.name, list0(perMB), list0(runsPerMB), bpfRuns, secs)
			b.ReportMetric(bpfstats.Median(perMB), cfg.key+"_bpf_ns/MB")
		}
	}
}

// bpfPerMB runs cfg's agent, ready as in the pairs, under one stream with
// run-time statistics on, and returns the BPF ns and runs of all its
// programs and the MB (1e6 bytes) the stream delivered.
func bpfPerMB(b *testing.B, col collector, lab *netlab.Lab, bin string, cfg costConfig, secs int, quiet time.Duration) (ns, runs, mb float64) {
	b.Helper()
	a := launchAgent(b, bin, col.grpcAddr, cfg.flags...)
	defer a.stop()
	col.ready(b, a, cfg, secs+int(cfg.rest/time.Second)+60, a.start.Add(cfg.rest-quiet))
	time.Sleep(time.Until(a.start.Add(cfg.rest)))
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		netlab.SkipOrFail(b, "BPF_ENABLE_STATS: %v", err)
	}
	defer c.Close()
	type prog struct {
		p    *ebpf.Program
		name string
		s0   *ebpf.ProgramStats
	}
	var progs []prog
	for _, id := range agentProgramIDs(b, a.cmd.Process.Pid) {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		defer p.Close()
		info, err := p.Info()
		if err != nil {
			continue
		}
		st, err := p.Stats()
		if err != nil {
			b.Fatalf("program %s stats: %v", info.Name, err)
		}
		progs = append(progs, prog{p, info.Name, st})
	}
	_, bytes := iperfBytes(b, lab, secs, 1)
	var names []string
	for _, p := range progs {
		st, err := p.p.Stats()
		if err != nil {
			b.Fatalf("program %s stats: %v", p.name, err)
		}
		ns += float64(st.Runtime - p.s0.Runtime)
		runs += float64(st.RunCount - p.s0.RunCount)
		names = append(names, p.name)
	}
	if cfg.triggered && !slices.Contains(names, "nbs_qdisc_queue") {
		b.Fatalf("%s: the triggered programs are not among the agent's: %v", cfg.name, names)
	}
	return ns, runs, bytes / 1e6
}

// pairStatsOf is a summary of on/off ratios.
type pairStatsOf struct {
	geomean, lo, hi          float64 // the geometric mean and its 95% bootstrap interval
	median, q1, q3, min, max float64
	below                    int
}

// pairStats summarizes the pairs' ratios: their geometric mean, with a 95%
// confidence interval by bootstrap over ABBA blocks (pairs 2k and 2k+1
// resampled together, as they were run: a drift of the machine's load
// within a block falls on both orders), and their spread.
func pairStats(r []float64) pairStatsOf {
	var st pairStatsOf
	s := slices.Sorted(slices.Values(r))
	st.min, st.max = s[0], s[len(s)-1]
	st.median, st.q1, st.q3 = quantile(s, 0.5), quantile(s, 0.25), quantile(s, 0.75)
	for _, x := range s {
		if x < 1 {
			st.below++
		}
	}
	var blocks [][]float64
	for i := 0; i < len(r); i += 2 {
		var bl []float64
		for _, x := range r[i:min(i+2, len(r))] {
			bl = append(bl, math.Log(x))
		}
		blocks = append(blocks, bl)
	}
	mean := func(pick func(int) []float64) float64 {
		sum, n := 0.0, 0
		for i := range blocks {
			for _, x := range pick(i) {
				sum += x
				n++
			}
		}
		return sum / float64(n)
	}
	st.geomean = math.Exp(mean(func(i int) []float64 { return blocks[i] }))
	// A fixed seed: the same pairs give the same interval.
	rng := rand.New(rand.NewPCG(31, 4))
	const resamples = 10000
	means := make([]float64, resamples)
	for j := range means {
		means[j] = mean(func(int) []float64 { return blocks[rng.IntN(len(blocks))] })
	}
	slices.Sort(means)
	st.lo, st.hi = math.Exp(quantile(means, 0.025)), math.Exp(quantile(means, 0.975))
	return st
}

// quantile of sorted s, interpolated.
func quantile(s []float64, q float64) float64 {
	x := q * float64(len(s)-1)
	i := int(x)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (x-float64(i))*(s[i+1]-s[i])
}

// cpuTimes is the machine's CPU time so far, from /proc/stat.
type cpuTimes struct{ busy, total uint64 }

func machineCPU(b *testing.B) cpuTimes {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	var t cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		t.total += v
		if i != 3 && i != 4 { // idle, iowait
			t.busy += v
		}
	}
	return t
}

// busySince is the share of the machine's CPU time busy since t0.
func (t cpuTimes) busySince(t0 cpuTimes) float64 {
	if t.total == t0.total {
		return 0
	}
	return float64(t.busy-t0.busy) / float64(t.total-t0.total)
}

// selfCPU is this process's CPU time so far (the in-process collector's,
// mostly).
func selfCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadavg() string {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func pct(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = 100 * x
	}
	return out
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
