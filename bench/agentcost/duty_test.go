package agentcost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// holdsStats says whether process pid holds a BPF_ENABLE_STATS descriptor
// (the kernel names it anon_inode:bpf-stats): whether the run-time
// statistics are on on its account. Other processes' descriptors do not
// count, so other agents on the machine leave the figure alone.
func holdsStats(pid int) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "anon_inode:bpf-stats" {
			return true, nil
		}
	}
	return false, nil
}

// BenchmarkStatsDuty measures the share of the time the default agent
// holds the kernel's BPF run-time statistics on (while they are, every run
// of every BPF program on the node pays two clock reads, ~90 ns: see
// BenchmarkRunTimeStats), sampling its descriptors every 50 ms after its
// first report is acked. With NBS_AGENTCOST_RATE set (iperf3's -b) one
// iperf3 stream runs through the lab meanwhile, so the budget's rules see
// traffic. With NBS_AGENTCOST_BASE set, that revision's agent takes turns
// with this tree's, round by round, for a before/after in one run.
//
//	NBS_AGENTCOST_BASE=<rev> NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1 go test -v -run '^$' -bench StatsDuty -benchtime 1x -timeout 30m ./bench/agentcost/
//
// NBS_AGENTCOST_ROUNDS (default 2) rounds of NBS_AGENTCOST_SECONDS
// (default 60) per build; NBS_AGENTCOST_FLAGS are more agent flags.
func BenchmarkStatsDuty(b *testing.B) {
	type build struct{ name, bin string }
	builds := []build{{"this tree", buildAgent(b)}}
	if rev := os.Getenv("NBS_AGENTCOST_BASE"); rev != "" {
		builds = append(builds, build{rev, buildAgentAt(b, rev)})
	}
	rate := os.Getenv("NBS_AGENTCOST_RATE")
	if rate != "" {
		if _, err := exec.LookPath("iperf3"); err != nil {
			netlab.SkipOrFail(b, "iperf3 is not installed")
		}
	}
	rounds, secs := envInt("NBS_AGENTCOST_ROUNDS", 2), envInt("NBS_AGENTCOST_SECONDS", 60)
	extra := strings.Fields(os.Getenv("NBS_AGENTCOST_FLAGS"))
	col := startCollector(b)
	lab := netlab.New(b)

	measure := func(bin string) float64 {
		a := launchAgent(b, bin, col.grpcAddr, extra...)
		defer a.stop()
		col.ready(b, a, costConfig{name: "default agent"}, 0, time.Now().Add(30*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
		defer cancel()
		var stream chan struct{}
		if rate != "" {
			srv := iperfServer(b, lab)
			defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
			cl := exec.CommandContext(ctx, "ip", "netns", "exec", lab.A, "iperf3", "-c", lab.IPB.String(), "-p", strconv.Itoa(iperfPort),
				"-t", strconv.Itoa(secs+5), "-b", rate, "-A", strconv.Itoa(cpus().client))
			if err := cl.Start(); err != nil {
				b.Fatalf("iperf3: %v", err)
			}
			stream = make(chan struct{})
			go func() { _ = cl.Wait(); close(stream) }()
		}
		var on, n int
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				if stream != nil {
					<-stream
				}
				// What the budget did meanwhile: an always-on source
				// shed over it changes what the statistics measure.
				log, _ := os.ReadFile(a.log)
				for l := range strings.Lines(string(log)) {
					if strings.Contains(l, "triggered source") {
						b.Logf("  agent: %.250s", strings.TrimSpace(l))
					}
				}
				return float64(on) / float64(n)
			case <-tick.C:
				held, err := holdsStats(a.cmd.Process.Pid)
				if err != nil {
					b.Fatalf("the agent's descriptors: %v", err)
				}
				n++
				if held {
					on++
				}
			}
		}
	}

	for range b.N {
		duty := make([][]float64, len(builds))
		for i := range rounds {
			for j := range builds {
				k := (j + i) % len(builds)
				duty[k] = append(duty[k], measure(builds[k].bin))
				b.Logf("round %d, %s: statistics on %.1f%% of %d s (load %s)", i+1, builds[k].name, 100*duty[k][len(duty[k])-1], secs, loadavg())
			}
		}
		for k, bd := range builds {
			metric := "stats_on_%"
			if k > 0 {
				metric = "base_stats_on_%"
			}
			b.Logf("%s: run-time statistics held on %s%% of the time (stream: %q)", bd.name, list(pct(duty[k])), rate)
			b.ReportMetric(100*bpfstats.Median(duty[k]), metric)
		}
	}
}
