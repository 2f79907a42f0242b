package agentcost

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/bench/bpfstats"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// BenchmarkAgentIdle measures the agent's footprint against its goals
// (docs/agent.md): its CPU idle, watching every network namespace of a node
// with many of them (NBS_AGENTCOST_NETNS, default 50, made for the run,
// beside the lab's and whatever else the machine has), ≤ 0.1% of a core;
// its CPU under one 10 Gbit/s iperf3 stream through the lab's veth pair,
// ≤ 0.5%; its peak resident memory (VmHWM) over all that, ≤ 24 MiB. Each
// measurement starts after the agent's first report was acked and a quiet
// of 5 s, so nothing of its start is in it. With NBS_AGENTCOST_BASE set to
// a git revision, the agent of that revision is measured too, round by
// round alternated with this tree's (which goes first alternates), for a
// before/after in one run; several revisions (or agent paths) separated
// by commas take turns alike.
//
//	NBS_AGENTCOST_BASE=<git revision> NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1 go test -run '^$' -bench AgentIdle -benchtime 1x -timeout 30m ./bench/agentcost/
//
// NBS_AGENTCOST_ROUNDS (default 3) rounds; NBS_AGENTCOST_IDLE (default 60)
// seconds idle and NBS_AGENTCOST_SECONDS (default 20) of the stream each.
//
// The collector's ping mesh is off: each agent of the run would otherwise
// ping the agents of the rounds before it (up to 8, on this machine's
// address), work that grows round by round and that an operator's fleet
// asks for; NBS_AGENTCOST_PEERS sets how many peers each agent pings.
// NBS_AGENTCOST_FLAGS are more flags for every agent (e.g.
// "--flows.enable=false", to see what one branch costs).
func BenchmarkAgentIdle(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		netlab.SkipOrFail(b, "iperf3 is not installed")
	}
	type build struct{ name, bin string }
	builds := []build{{"this tree", buildAgent(b)}}
	for rev := range strings.SplitSeq(os.Getenv("NBS_AGENTCOST_BASE"), ",") {
		if rev != "" {
			builds = append(builds, build{rev, buildAgentAt(b, rev)})
		}
	}
	peers := 0
	if v, err := strconv.Atoi(os.Getenv("NBS_AGENTCOST_PEERS")); err == nil {
		peers = v
	}
	col := startCollector(b, func(c *collectorapp.Config) { c.NodeConfig.PingPeers = peers })
	flags := strings.Fields(os.Getenv("NBS_AGENTCOST_FLAGS"))
	lab := netlab.New(b)
	netnsCount := envInt("NBS_AGENTCOST_NETNS", 50)
	makeNamespaces(b, netnsCount)
	rounds := envInt("NBS_AGENTCOST_ROUNDS", 3)
	idle := time.Duration(envInt("NBS_AGENTCOST_IDLE", 60)) * time.Second
	secs := envInt("NBS_AGENTCOST_SECONDS", 20)
	const quiet = 5 * time.Second
	ready := costConfig{name: "default agent"}

	type result struct{ idle, wakeups, loaded, gbps, peak []float64 }
	for range b.N {
		b.Logf("load average at the start: %s; network namespaces on the machine: %d; ping peers %d; agent flags %q",
			loadavg(), countNamespaces(), peers, flags)
		results := make([]result, len(builds))
		for i := range rounds {
			for j := range builds {
				k := (j + i) % len(builds)
				a := launchAgent(b, builds[k].bin, col.grpcAddr, flags...)
				col.ready(b, a, ready, 0, time.Now().Add(60*time.Second))
				time.Sleep(quiet)
				before := a.triggered()
				c0, t0, w0 := a.cpu(b), time.Now(), a.switches()
				time.Sleep(idle)
				idleCPU := float64(a.cpu(b)-c0) / float64(time.Since(t0))
				wakeups := float64(a.switches()-w0) / time.Since(t0).Seconds()
				triggered := triggeredNote(before, a.triggered()[len(before):])
				c0, t0 = a.cpu(b), time.Now()
				bps := iperfArgs(b, lab, secs, 1, "-b", "10G")
				loadCPU := float64(a.cpu(b)-c0) / float64(time.Since(t0))
				r := &results[k]
				r.idle = append(r.idle, 100*idleCPU)
				r.loaded = append(r.loaded, 100*loadCPU)
				r.gbps = append(r.gbps, bps/1e9)
				r.peak = append(r.peak, float64(a.peakKiB(b))/1024)
				r.wakeups = append(r.wakeups, wakeups)
				a.stop()
				b.Logf("round %d, %s: idle %.3f%% of a core (%.0f context switches a second), %.3f%% under %.1f Gbit/s, peak RSS %.1f MiB (load average %s)%s",
					i+1, builds[k].name, 100*idleCPU, wakeups, 100*loadCPU, bps/1e9, r.peak[len(r.peak)-1], loadavg(), triggered)
			}
		}
		for k, r := range results {
			b.Logf("%s, %d rounds, %d namespaces of ours: idle (%s) %s%% of a core (median %.3f; context switches a second %s); one stream at %s Gbit/s (%d s) %s%% (median %.3f); peak RSS %s MiB",
				builds[k].name, rounds, netnsCount, idle, list3(r.idle), bpfstats.Median(r.idle), list0(r.wakeups), list(r.gbps), secs, list3(r.loaded), bpfstats.Median(r.loaded), list(r.peak))
		}
		r := results[0]
		b.ReportMetric(bpfstats.Median(r.idle), "idle_cpu%")
		b.ReportMetric(bpfstats.Median(r.loaded), "10G_cpu%")
		b.ReportMetric(slices.Max(r.peak), "peak_MiB")
	}
}

// triggered lists the agent's log lines that say a triggered source was
// attached or detached, in order: a busy machine's trouble (other tenants'
// retransmits, resets, drops) attaches sources an idle one does not, whose
// reading is in the round's figures.
func (a *agent) triggered() []string {
	log, _ := os.ReadFile(a.log)
	var out []string
	for line := range strings.SplitSeq(string(log), "\n") {
		if _, rest, ok := strings.Cut(line, `msg="triggered source `); ok {
			action, _, _ := strings.Cut(rest, `"`)
			name := ""
			if _, n, ok := strings.Cut(rest, `triggered="`); ok {
				name, _, _ = strings.Cut(n, `"`)
			}
			out = append(out, action+" "+name)
		}
	}
	return out
}

// triggeredNote says which triggered sources (but the always-on ones) were
// attached as a window began, and which came or went during it.
func triggeredNote(before, during []string) string {
	var on []string
	for _, l := range before {
		action, name, _ := strings.Cut(l, " ")
		switch {
		case strings.Contains(name, "always on"):
		case action == "attached":
			on = append(on, name)
		case action == "detached":
			on = slices.DeleteFunc(on, func(n string) bool { return n == name })
		}
	}
	var note string
	if len(on) > 0 {
		note += "; attached: " + strings.Join(on, ", ")
	}
	if len(during) > 0 {
		note += "; during the window: " + strings.Join(during, ", ")
	}
	return note
}

// makeNamespaces adds n named network namespaces, each with its loopback
// up, for the run.
func makeNamespaces(b *testing.B, n int) {
	prefix := "cost-" + netlab.RandHex(6) + "-"
	for i := range n {
		name := prefix + strconv.Itoa(i)
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			b.Fatalf("ip netns add %s: %v: %s", name, err, out)
		}
		b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
		if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
			b.Fatalf("ip -n %s link set lo up: %v: %s", name, err, out)
		}
	}
}

// countNamespaces counts the machine's network namespaces (distinct
// /proc/*/ns/net and /run/netns).
func countNamespaces() int {
	seen := map[string]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%s/ns/net", p.Name())); err == nil {
			seen[l] = true
		}
	}
	named, _ := os.ReadDir("/run/netns")
	for _, n := range named {
		var st unix.Stat_t
		if unix.Stat("/run/netns/"+n.Name(), &st) == nil {
			seen[fmt.Sprintf("net:[%d]", st.Ino)] = true
		}
	}
	return len(seen)
}

// switches is the agent's context switches so far (voluntary and not, of
// its threads alive now): how often it wakes.
func (a *agent) switches() int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", a.cmd.Process.Pid))
	n := 0
	for _, t := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", a.cmd.Process.Pid, t.Name()))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				x, _ := strconv.Atoi(strings.TrimSpace(v))
				n += x
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				x, _ := strconv.Atoi(strings.TrimSpace(v))
				n += x
			}
		}
	}
	return n
}
