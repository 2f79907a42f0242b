package agentcost

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// BenchmarkRunTimeStats measures what the kernel's BPF run-time statistics
// (BPF_ENABLE_STATS, which the agent keeps on for its lifetime to measure
// its programs and enforce --overhead.budget) add to every run of every BPF
// program on the node: the per-run time of a program that does nothing
// (r0 = 0), run by BPF_PROG_TEST_RUN in a kernel loop, with statistics off
// and on, alternated. The kernel's own loop timing is the measure, not the
// statistics. Statistics held on by anything else on the machine (an agent
// running, another benchmark) make "off" meaningless: the benchmark fails
// then.
func BenchmarkRunTimeStats(b *testing.B) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		netlab.SkipOrFail(b, "load a socket filter: %v", err)
	}
	defer prog.Close()
	const repeat = 2_000_000
	in := make([]byte, 64)
	perRun := func() time.Duration {
		best := time.Hour
		for range 5 {
			_, d, err := prog.Benchmark(in, repeat, nil)
			if err != nil {
				b.Fatalf("BPF_PROG_TEST_RUN: %v", err)
			}
			best = min(best, d)
		}
		return best
	}
	// heldElsewhere runs the program a little with our statistics off:
	// if the kernel counts the runs, something else holds them on.
	heldElsewhere := func() bool {
		before, err := prog.Stats()
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := prog.Benchmark(in, 1000, nil); err != nil {
			b.Fatalf("BPF_PROG_TEST_RUN: %v", err)
		}
		after, err := prog.Stats()
		if err != nil {
			b.Fatal(err)
		}
		return after.RunCount != before.RunCount
	}
	const rounds = 3
	for range b.N {
		var off, on []float64
		for range rounds {
			if heldElsewhere() {
				b.Fatal("BPF run-time statistics are on for something else on this machine (a running agent?): stop it first")
			}
			off = append(off, float64(perRun().Nanoseconds()))
			c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				netlab.SkipOrFail(b, "BPF_ENABLE_STATS: %v", err)
			}
			on = append(on, float64(perRun().Nanoseconds()))
			if err := c.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("ns per run of an empty program (best of 5 loops of %d, %d rounds): statistics off %v, on %v", repeat, rounds, off, on)
		b.ReportMetric(bpfstats.Median(off), "ns/run_off")
		b.ReportMetric(bpfstats.Median(on), "ns/run_on")
	}
}

// BenchmarkClockHelpers measures what a BPF program pays for the clocks it
// may read per packet: bpf_ktime_get_ns (a call into the kernel's clock
// source, kvm-clock on a VM) against bpf_jiffies64 (which the verifier
// inlines into a load), ten calls per run of a socket filter in
// BPF_PROG_TEST_RUN, beside the same program without them (the anchor);
// best of 5 loops of 1,000,000 runs, 3 rounds.
func BenchmarkClockHelpers(b *testing.B) {
	mk := func(calls int, fn asm.BuiltinFunc) *ebpf.Program {
		var ins asm.Instructions
		for range calls {
			ins = append(ins, fn.Call())
		}
		ins = append(ins, asm.Mov.Imm(asm.R0, 0), asm.Return())
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: ins})
		if err != nil {
			netlab.SkipOrFail(b, "load a socket filter: %v", err)
		}
		b.Cleanup(func() { _ = p.Close() })
		return p
	}
	progs := []struct {
		name string
		prog *ebpf.Program
	}{
		{"none", mk(0, asm.FnKtimeGetNs)},
		{"ktime_get_ns", mk(10, asm.FnKtimeGetNs)},
		{"jiffies64", mk(10, asm.FnJiffies64)},
	}
	in := make([]byte, 64)
	for range b.N {
		per := make([][]float64, len(progs))
		for range 3 {
			for i, p := range progs {
				best := time.Hour
				for range 5 {
					_, d, err := p.prog.Benchmark(in, 1_000_000, nil)
					if err != nil {
						b.Fatalf("BPF_PROG_TEST_RUN: %v", err)
					}
					best = min(best, d)
				}
				per[i] = append(per[i], float64(best.Nanoseconds()))
			}
		}
		for i, p := range progs[1:] {
			call := make([]float64, len(per[0]))
			for r := range per[0] {
				call[r] = (per[i+1][r] - per[0][r]) / 10
			}
			b.Logf("%s: %.1f ns a call (rounds: %v ns a run of 10 calls, anchor %v)", p.name, bpfstats.Median(call), per[i+1], per[0])
			b.ReportMetric(bpfstats.Median(call), p.name+"-ns/call")
		}
	}
}
