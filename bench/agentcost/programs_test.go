package agentcost

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// agentProgramIDs are the BPF programs the agent process holds (its
// program and link file descriptors name them in fdinfo): only its own,
// however many other agents or benchmarks run on the machine.
func agentProgramIDs(b *testing.B, pid int) []ebpf.ProgramID {
	b.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatalf("list the agent's descriptors: %v", err)
	}
	seen := map[ebpf.ProgramID]bool{}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "prog_id:"); ok {
				if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil && id != 0 {
					seen[ebpf.ProgramID(id)] = true
				}
			}
		}
		f.Close()
	}
	ids := make([]ebpf.ProgramID, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// triggeredOnly are the programs an expand adds to the default agent's
// (latency/qdisc and latency/flows; latency/rx is on by default): what the
// triggered configuration costs beyond the default.
var triggeredOnly = map[string]bool{"nbs_qdisc_queue": true, "nbs_qdisc_xmit": true, "nbs_flow_probe": true}

// progCost is what one program cost over one iperf3 run.
type progCost struct {
	name              string
	runsPerSec        float64
	medianNs, meanNs  float64
	nsPerMB, runsPerM float64 // BPF ns and runs per MB (1e6 bytes) received
}

// BenchmarkTriggeredPrograms places what the triggered configuration costs
// the data path, program by program: the real nbs-agent with its triggered
// sources attached by an operator's expand (as the "triggered"
// configuration of BenchmarkAgentCost), a single iperf3 stream through the
// lab's veth pair, and every program the agent holds sampled with the
// kernel's run-time statistics (bench/bpfstats): its runs per second, its
// ns/run (median of 100 ms windows, and mean), and the BPF time it spends
// per MB the stream delivered. With NBS_AGENTCOST_BASE set to a git
// revision, the agent of that revision is measured too, run for run
// alternated with this tree's (which goes first alternates), for a
// before/after in one run.
//
//	NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1 go test -v -run '^$' -bench TriggeredPrograms -benchtime 1x -timeout 30m ./bench/agentcost/
//
// NBS_AGENTCOST_ROUNDS (default 3) runs of each build, NBS_AGENTCOST_SECONDS
// (default 5) each. NBS_AGENTCOST_CONFIG=default measures the default agent
// instead (no expand, its default interval and budget: what every node
// pays), and NBS_AGENTCOST_FLAGS adds flags to every agent (an ablation:
// e.g. "--dns=false"). The tracepoints are machine-wide and the agent watches
// every namespace, so other traffic on the machine counts too (it is small
// beside the stream's, and the runs per MB say so).
func BenchmarkTriggeredPrograms(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		netlab.SkipOrFail(b, "iperf3 is not installed")
	}
	type build struct{ name, bin string }
	builds := []build{{"this tree", buildAgent(b)}}
	if rev := os.Getenv("NBS_AGENTCOST_BASE"); rev != "" {
		builds = append(builds, build{rev, buildAgentAt(b, rev)})
	}
	col := startCollector(b)
	lab := netlab.New(b)
	// Statistics on for the whole benchmark, for every build alike (the
	// agent's own switching then changes nothing).
	bpfstats.Enable(b)
	rounds, secs := envInt("NBS_AGENTCOST_ROUNDS", 3), envInt("NBS_AGENTCOST_SECONDS", 5)
	triggered := true
	switch c := os.Getenv("NBS_AGENTCOST_CONFIG"); c {
	case "", "triggered":
	case "default":
		triggered = false
	default:
		b.Fatalf("NBS_AGENTCOST_CONFIG: unknown configuration %q (known: default, triggered)", c)
	}
	extra := strings.Fields(os.Getenv("NBS_AGENTCOST_FLAGS"))

	// measure runs one build's agent, triggered, under one stream.
	measure := func(bin string) (costs []progCost, gbps float64) {
		if !triggered {
			return measureDefault(b, bin, col, lab, secs, extra)
		}
		// A short interval: the expand reaches the agent and attaches
		// at its next collection within a few seconds.
		a := launchAgent(b, bin, col.grpcAddr, append([]string{"--overhead.budget", "100", "--interval", "2s"}, extra...)...)
		t0 := time.Now()
		for !col.expand(b, a.node, 120) {
			if time.Since(t0) > 30*time.Second {
				b.Fatal("the collector does not know the agent's stream after 30 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !a.waitLog("triggered source attached", time.Now().Add(30*time.Second)) {
			log, _ := os.ReadFile(a.log)
			b.Fatalf("no triggered source attached within 30 s:\n%s", log)
		}
		// Every triggered source attaches in the same step; let the
		// machine settle after the start.
		time.Sleep(2 * time.Second)
		costs, gbps = sampleAgent(b, a, lab, secs)
		a.stop()
		// The run measures the triggered configuration only if the
		// triggered programs ran under the stream.
		for name := range triggeredOnly {
			if !slices.ContainsFunc(costs, func(c progCost) bool { return c.name == name && c.runsPerSec > 0 }) {
				b.Errorf("%s did not run under the stream: the triggered sources were not attached", name)
			}
		}
		time.Sleep(3 * time.Second) // cooldown, as BenchmarkAgentCost's
		return costs, gbps
	}

	for range b.N {
		// per build: program name -> its costs over the rounds
		type agg struct {
			runsPerSec, median, mean, nsPerMB, runsPerMB []float64
		}
		all := make([]map[string]*agg, len(builds))
		totals := make([][]float64, len(builds))
		added := make([][]float64, len(builds)) // triggeredOnly's part of the total
		for k := range all {
			all[k] = map[string]*agg{}
		}
		for i := range rounds {
			for j := range builds {
				k := (j + i) % len(builds)
				costs, gbps := measure(builds[k].bin)
				total, add := 0.0, 0.0
				for _, c := range costs {
					total += c.nsPerMB
					if triggeredOnly[c.name] {
						add += c.nsPerMB
					}
					a := all[k][c.name]
					if a == nil {
						a = &agg{}
						all[k][c.name] = a
					}
					a.runsPerSec = append(a.runsPerSec, c.runsPerSec)
					a.median = append(a.median, c.medianNs)
					a.mean = append(a.mean, c.meanNs)
					a.nsPerMB = append(a.nsPerMB, c.nsPerMB)
					a.runsPerMB = append(a.runsPerMB, c.runsPerM)
				}
				totals[k] = append(totals[k], total)
				added[k] = append(added[k], add)
				b.Logf("round %d, %s: %.1f Gbit/s, BPF %.0f ns per MB received (%.2f%% of a CPU at this rate), of which the triggered programs %.0f",
					i+1, builds[k].name, gbps, total, 100*total*gbps*1e9/8/1e6/1e9, add)
			}
		}
		for k, bd := range builds {
			b.Logf("%s, %d rounds of %d s, one stream: program | runs/s | runs per MB | ns/run median | ns/run mean | BPF ns per MB", bd.name, rounds, secs)
			names := make([]string, 0, len(all[k]))
			for n := range all[k] {
				names = append(names, n)
			}
			// Costliest first.
			slices.SortFunc(names, func(x, y string) int {
				return int(bpfstats.Median(all[k][y].nsPerMB) - bpfstats.Median(all[k][x].nsPerMB))
			})
			for _, n := range names {
				a := all[k][n]
				b.Logf("  %-16s | %s | %s | %s | %s | %s", n, list0(a.runsPerSec), list0(a.runsPerMB), list0(a.median), list0(a.mean), list0(a.nsPerMB))
			}
			b.Logf("  %-16s | | | | | %s", "total", list0(totals[k]))
			b.Logf("  %-16s | | | | | %s", "triggered only", list0(added[k]))
			metric := "ns/MB"
			if k > 0 {
				metric = "base_ns/MB"
			}
			b.ReportMetric(bpfstats.Median(totals[k]), metric)
		}
		if len(builds) == 2 {
			// Before/after, round by round: the two builds of a round ran
			// back to back, so a drift of the machine's load falls on
			// both; the median of the rounds' ratios.
			names := map[string]bool{}
			for n := range all[0] {
				names[n] = true
			}
			var out []string
			for _, n := range slices.Sorted(maps.Keys(names)) {
				a, base := all[0][n], all[1][n]
				if base == nil || len(a.median) != len(base.median) || slices.Contains(base.median, 0) {
					continue
				}
				ns, perMB := make([]float64, len(a.median)), make([]float64, len(a.median))
				for i := range a.median {
					ns[i] = a.median[i] / base.median[i]
					perMB[i] = a.nsPerMB[i] / base.nsPerMB[i]
				}
				out = append(out, fmt.Sprintf("%s %.2f (ns/MB %.2f)", n, bpfstats.Median(ns), bpfstats.Median(perMB)))
			}
			ratio := func(x, y []float64) float64 {
				r := make([]float64, len(x))
				for i := range x {
					r[i] = x[i] / y[i]
				}
				return bpfstats.Median(r)
			}
			b.Logf("%s / %s, median of the rounds' ratios: ns/run median: %s; total ns/MB %.2f, triggered programs' ns/MB %.2f",
				builds[0].name, builds[1].name, strings.Join(out, ", "), ratio(totals[0], totals[1]), ratio(added[0], added[1]))
			b.ReportMetric(ratio(added[0], added[1]), "triggered_ns/MB_ratio")
		}
	}
}

// sampleAgent samples every program the running agent holds over one
// iperf3 stream of secs seconds.
func sampleAgent(b *testing.B, a *agent, lab *netlab.Lab, secs int) (costs []progCost, gbps float64) {
	type sampled struct {
		name string
		s    *bpfstats.Sampler
		prog *ebpf.Program
	}
	var ss []sampled
	for _, id := range agentProgramIDs(b, a.cmd.Process.Pid) {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err != nil {
			p.Close()
			continue
		}
		ss = append(ss, sampled{name: info.Name, s: bpfstats.Start(b, p), prog: p})
	}
	bps, bytes := iperfBytes(b, lab, secs, 1)
	mb := bytes / 1e6
	for _, s := range ss {
		r, ok := s.s.Stop()
		s.prog.Close()
		if !ok {
			costs = append(costs, progCost{name: s.name})
			continue
		}
		costs = append(costs, progCost{name: s.name, runsPerSec: float64(r.Runs) / float64(secs),
			medianNs: r.MedianNs, meanNs: r.MeanNs,
			nsPerMB: r.MeanNs * float64(r.Runs) / mb, runsPerM: float64(r.Runs) / mb})
	}
	return costs, bps / 1e9
}

// measureDefault runs one build's default agent (its default interval and
// budget, nothing expanded) under one stream, once its first report is
// acked and its start is over.
func measureDefault(b *testing.B, bin string, col collector, lab *netlab.Lab, secs int, extra []string) ([]progCost, float64) {
	a := launchAgent(b, bin, col.grpcAddr, extra...)
	// Past the start: programs attached, the first report acked (every
	// source has collected once), as BenchmarkAgentCost's "on" runs.
	col.ready(b, a, costConfig{name: "default agent"}, 0, time.Now().Add(30*time.Second))
	time.Sleep(time.Second)
	costs, gbps := sampleAgent(b, a, lab, secs)
	a.stop()
	time.Sleep(3 * time.Second) // cooldown, as BenchmarkAgentCost's
	return costs, gbps
}

func list0(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(out, " ")
}
