// Package latencydrops measures what the always-on programs of the latency
// and drops branches cost per run, under load in the namespace lab:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/latencydrops/
//
// Run time statistics are switched on with BPF_ENABLE_STATS (the same
// counters as kernel.bpf_stats_enabled=1, but reference-counted and undone
// when the benchmark ends) and read with Program.Stats(). Each program's
// statistics are sampled every 100 ms during the load; the benchmark reports
// the median of those windows' ns/run (the figure BENCHMARKS.md records),
// the overall mean and the number of runs, and the same for the floor: an
// empty program at the same tracepoint (bench/floor), attached before the
// probe in the same run, which is what any program there costs.
package latencydrops

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/drops"
	"github.com/nbs-project/nbs/agent/probe/latency"
	"github.com/nbs-project/nbs/agent/probe/tcpreset"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/floor"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// report stops s and reports its median and mean ns/run and runs; unit
// prefixes the metrics ("" for the probe's, "floor-" for the floor's).
func report(b *testing.B, s *bpfstats.Sampler, name, unit string) bpfstats.Result {
	r, ok := s.Stop()
	if !ok {
		b.Fatalf("%s: the program never ran under the load", name)
	}
	b.ReportMetric(r.MedianNs, unit+"ns/run-median")
	b.ReportMetric(r.MeanNs, unit+"ns/run-mean")
	b.ReportMetric(float64(r.Runs), unit+"runs")
	b.ReportMetric(float64(r.RecursionMisses), unit+"recursion-misses")
	b.Logf("%s: %d runs, median %.0f ns/run, mean %.0f ns/run", name, r.Runs, r.MedianNs, r.MeanNs)
	return r
}

// floorAt loads and attaches the empty programs at hooks, detached when
// the benchmark ends.
func floorAt(b *testing.B, hooks ...string) map[string]*ebpf.Program {
	fl, err := floor.Load()
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	b.Cleanup(func() { fl.Close() })
	progs, err := fl.Attach(hooks...)
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	return progs
}

// reportWithFloor reports the program's and the floor's figures and the
// program's median over the floor's.
func reportWithFloor(b *testing.B, s, f *bpfstats.Sampler, name string) {
	r := report(b, s, name, "")
	fr := report(b, f, name+" floor (empty program, same hook)", "floor-")
	if fr.MedianNs > 0 {
		b.ReportMetric(r.MedianNs/fr.MedianNs, "x-floor")
		b.Logf("%s: %.2f× the floor", name, r.MedianNs/fr.MedianNs)
	}
}

// BenchmarkKfreeSkb floods B with UDP to a closed port (every datagram is a
// no_socket drop) and through a netfilter drop rule, as fast as one sender
// goes, for each way the agent loads the program.
func BenchmarkKfreeSkb(b *testing.B) {
	for _, c := range []struct {
		name string
		opts func(l *netlab.Lab) drops.Options
	}{
		{"one-netns/evidence", func(l *netlab.Lab) drops.Options {
			return drops.Options{NetnsInode: l.Inode(b, l.B)}
		}},
		{"all-netns/evidence", func(*netlab.Lab) drops.Options { return drops.Options{} }},
		{"one-netns/no-evidence", func(l *netlab.Lab) drops.Options {
			return drops.Options{NetnsInode: l.Inode(b, l.B), EvidencePerSecond: -1}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := netlab.New(b)
			l.Nft(b, l.B, `table inet nbs_bench {
	chain in {
		type filter hook input priority 0; policy accept;
		udp dport 7777 counter drop
	}
}`)
			fl := floorAt(b, "kfree_skb")
			p, err := drops.Load(c.opts(l))
			if err != nil {
				netlab.SkipOrFail(b, "drops: %v", err)
			}
			defer p.Close()
			bpfstats.Enable(b)
			for i := 0; i < b.N; i++ {
				s, f := bpfstats.Start(b, p.Programs()["kfree_skb"]), bpfstats.Start(b, fl["kfree_skb"])
				for _, port := range []uint16{9999, 7777} {
					l.SendUDP(b, l.A, netip.AddrPortFrom(l.IPB, port), 100_000, 64, 0)
				}
				reportWithFloor(b, s, f, "kfree_skb")
			}
		})
	}
}

// BenchmarkRetransmit runs a bulk transfer through 5% random loss.
func BenchmarkRetransmit(b *testing.B) {
	for _, c := range []struct {
		name string
		netA bool
	}{{"one-netns", true}, {"all-netns", false}} {
		b.Run(c.name, func(b *testing.B) {
			l := netlab.New(b)
			fl := floorAt(b, "tcp_retransmit_skb")
			opts := latency.Options{}
			if c.netA {
				opts.NetnsInode = l.Inode(b, l.A)
			}
			p, err := latency.Load(opts)
			if err != nil {
				netlab.SkipOrFail(b, "retrans: %v", err)
			}
			defer p.Close()
			bpfstats.Enable(b)
			for i := 0; i < b.N; i++ {
				s, f := bpfstats.Start(b, p.Programs()["tcp_retransmit_skb"]), bpfstats.Start(b, fl["tcp_retransmit_skb"])
				l.LossyBulk(b, 50, 5*time.Second)
				reportWithFloor(b, s, f, "tcp_retransmit_skb")
			}
		})
	}
}

// BenchmarkTCPReset makes a reset storm in the lab: connects to a closed
// port (NO_SOCKET resets sent by B, received by A in SYN_SENT), with the
// evidence rate limit as the agent runs it.
func BenchmarkTCPReset(b *testing.B) {
	l := netlab.New(b)
	fl := floorAt(b, "tcp_send_reset", "tcp_receive_reset")
	p, err := tcpreset.Load(tcpreset.Options{})
	if err != nil {
		netlab.SkipOrFail(b, "tcp_reset: %v", err)
	}
	defer p.Close()
	bpfstats.Enable(b)
	for i := 0; i < b.N; i++ {
		send, recv := bpfstats.Start(b, p.Programs()["tcp_send_reset"]), bpfstats.Start(b, p.Programs()["tcp_receive_reset"])
		fsend, frecv := bpfstats.Start(b, fl["tcp_send_reset"]), bpfstats.Start(b, fl["tcp_receive_reset"])
		l.ResetNoSocket(b, 20_000)
		reportWithFloor(b, send, fsend, "tcp_send_reset")
		reportWithFloor(b, recv, frecv, "tcp_receive_reset")
	}
}
