package agentcost

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// BenchmarkStreamCPU measures what the agent costs a stream in CPU rather
// than in throughput: one iperf3 stream held at a fixed rate
// (NBS_AGENTCOST_RATE, iperf3's -b, default 4G: below what this machine
// moves even when busy, so both sides move the same bytes), and the CPU
// time the iperf3 client and server spent per MB received, as iperf3
// reports it (getrusage: the processes' own time, with the softirq
// processing that ran in their context, which is where veth delivers and
// where the BPF programs, the RX timestamps and the run-time statistics
// are paid). Other work on the machine does not count in it, only slows
// it through the caches, so it resolves what a throughput pair cannot on
// a shared machine, and it catches what BPF ns per MB does not (the
// tracepoints' dispatch, the clock reads of RX timestamps and of run-time
// statistics).
//
//	NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1 go test -v -run '^$' -bench StreamCPU -benchtime 1x -timeout 60m ./bench/agentcost/
//
// NBS_AGENTCOST_ONLY lists the configurations (costConfigs' names, and
// "off" for no agent; default "off,default"); they take turns run by run,
// the order rotating each round, NBS_AGENTCOST_ROUNDS (default 6) rounds
// of NBS_AGENTCOST_SECONDS (default 5) each. With NBS_AGENTCOST_BASE set,
// "base" is that revision's default agent. Each configuration reports the
// median CPU ns per MB and, round by round, its ratio to "off".
func BenchmarkStreamCPU(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		netlab.SkipOrFail(b, "iperf3 is not installed")
	}
	rate := os.Getenv("NBS_AGENTCOST_RATE")
	if rate == "" {
		rate = "4G"
	}
	rounds, secs := envInt("NBS_AGENTCOST_ROUNDS", 6), envInt("NBS_AGENTCOST_SECONDS", 5)
	only := os.Getenv("NBS_AGENTCOST_ONLY")
	if only == "" {
		only = "off,default"
	}
	type cfg struct {
		costConfig
		bin string
	}
	bin := buildAgent(b)
	known := costConfigs(0)
	var cfgs []cfg
	for name := range strings.SplitSeq(only, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "off":
			cfgs = append(cfgs, cfg{costConfig: costConfig{key: "off", name: "no agent"}})
		case "base":
			rev := os.Getenv("NBS_AGENTCOST_BASE")
			if rev == "" {
				b.Fatal("NBS_AGENTCOST_ONLY: base needs NBS_AGENTCOST_BASE")
			}
			cfgs = append(cfgs, cfg{costConfig: costConfig{key: "base", name: "default agent at " + rev}, bin: buildAgentAt(b, rev)})
		default:
			c, ok := known[name]
			if !ok {
				b.Fatalf("NBS_AGENTCOST_ONLY: unknown configuration %q", name)
			}
			if c.triggered {
				b.Fatalf("NBS_AGENTCOST_ONLY: %s: the stream's CPU measures untriggered agents only", name)
			}
			c.key = name
			cfgs = append(cfgs, cfg{costConfig: c, bin: bin})
		}
	}
	col := startCollector(b)
	lab := netlab.New(b)

	// run measures one configuration once: its agent (if any) started and
	// its first report acked, a second's rest, the stream.
	run := func(c cfg) (nsPerMB, mbps float64) {
		var a *agent
		if c.bin != "" {
			a = launchAgent(b, c.bin, col.grpcAddr, c.flags...)
			col.ready(b, a, c.costConfig, 0, time.Now().Add(30*time.Second))
		}
		time.Sleep(time.Second)
		cpuSecs, bytes := iperfCPU(b, lab, secs, rate)
		if a != nil {
			a.stop()
		}
		time.Sleep(2 * time.Second) // cooldown
		mb := bytes / 1e6
		return cpuSecs * 1e9 / mb, mb / float64(secs)
	}

	for range b.N {
		b.Logf("load average at the start: %s", loadavg())
		per := make([][]float64, len(cfgs))
		speed := make([][]float64, len(cfgs))
		for i := range rounds {
			for j := range cfgs {
				k := (j + i) % len(cfgs)
				ns, mbps := run(cfgs[k])
				per[k] = append(per[k], ns)
				speed[k] = append(speed[k], mbps)
			}
			b.Logf("round %d (load %s): %s", i+1, loadavg(), strings.Join(func() []string {
				var out []string
				for k, c := range cfgs {
					out = append(out, fmt.Sprintf("%s %.0f ns/MB", c.key, per[k][i]))
				}
				return out
			}(), ", "))
		}
		b.Logf("load average at the end: %s", loadavg())
		off := slices.IndexFunc(cfgs, func(c cfg) bool { return c.key == "off" })
		for k, c := range cfgs {
			line := fmt.Sprintf("%s: iperf3 client+server CPU ns per MB at -b %s: median %.0f (%s), MB/s %s",
				c.name, rate, bpfstats.Median(per[k]), list0(per[k]), list0(speed[k]))
			b.ReportMetric(bpfstats.Median(per[k]), c.key+"_cpu_ns/MB")
			if off >= 0 && k != off {
				r := make([]float64, rounds)
				d := make([]float64, rounds)
				for i := range r {
					r[i] = per[k][i] / per[off][i]
					d[i] = per[k][i] - per[off][i]
				}
				line += fmt.Sprintf("; / off, round by round: median %.3f (%s); more than off: median %.0f ns/MB", bpfstats.Median(r), list3(r), bpfstats.Median(d))
				b.ReportMetric(bpfstats.Median(r), c.key+"_cpu/off")
			}
			b.Log(line)
		}
	}
}

// iperfCPU runs one iperf3 stream from A to B at rate for secs seconds
// and returns the CPU seconds its client and server spent and the bytes
// the server received.
func iperfCPU(b *testing.B, lab *netlab.Lab, secs int, rate string) (cpuSecs, bytes float64) {
	b.Helper()
	srv := iperfServer(b, lab)
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var res struct {
		End struct {
			SumReceived struct {
				Seconds float64 `json:"seconds"`
				Bytes   float64 `json:"bytes"`
			} `json:"sum_received"`
			CPU struct {
				Host   float64 `json:"host_total"`
				Remote float64 `json:"remote_total"`
			} `json:"cpu_utilization_percent"`
		} `json:"end"`
		Error string `json:"error"`
	}
	for try := 0; ; try++ {
		out, err := exec.Command("ip", "netns", "exec", lab.A, "iperf3", "-c", lab.IPB.String(), "-p", strconv.Itoa(iperfPort),
			"-t", strconv.Itoa(secs), "-b", rate, "-J", "-A", strconv.Itoa(cpus().client)).Output()
		if jerr := json.Unmarshal(out, &res); jerr != nil {
			b.Fatalf("iperf3: %v, output %v: %.300s", err, jerr, out)
		}
		if res.Error == "" && res.End.SumReceived.Bytes > 0 {
			break
		}
		if try == 20 || !strings.Contains(res.Error, "refused") {
			b.Fatalf("iperf3: %v: %s", err, res.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// iperf3's percentages are of the test's wall time.
	return (res.End.CPU.Host + res.End.CPU.Remote) / 100 * res.End.SumReceived.Seconds, res.End.SumReceived.Bytes
}
