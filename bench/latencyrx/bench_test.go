// Package latencyrx measures what the receive-latency programs
// (bpf/latencyrx.bpf.c) cost per run, under load in the namespace lab,
// beside a netstacklat-shaped peer (bpf/test/netstacklat_peer.bpf.c)
// attached at the same hooks in the same run:
//
//	NBS_REQUIRE_BPF=1 go test -run '^$' -bench . -benchtime 1x ./bench/latencyrx/
//
// Run-time statistics are switched on with BPF_ENABLE_STATS (the counters
// kernel.bpf_stats_enabled=1 turns on, reference-counted and undone when the
// benchmark ends) and read with Program.Stats() every 100 ms during each
// load; the benchmark reports the median of those windows' ns/run, the mean
// over the load and the number of runs, per program and load, and logs
// each hook's median against the peer's.
package latencyrx

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	probe "github.com/nbs-project/nbs/agent/probe/latencyrx"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/latencyrx/peer"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

// BenchmarkReceive attaches three sets of programs on the same hooks and
// loads them with a UDP flood and a TCP bulk transfer from A to B:
//   - "nbs": the probe as the agent runs it by default, in every namespace;
//   - "peer": the netstacklat-shaped peer, in every namespace;
//   - "foreign": the probe restricted to a namespace with no traffic (agent
//     --netns elsewhere): every run leaves after the namespace test.
func BenchmarkReceive(b *testing.B) {
	lab := netlab.New(b)
	load := func(inode uint32) *probe.Probe {
		p, err := probe.Load(probe.Options{NetnsInode: inode})
		if err != nil {
			netlab.SkipOrFail(b, "latencyrx: %v", err)
		}
		b.Cleanup(func() { p.Close() })
		if err := p.Attach(); err != nil {
			b.Fatal(err)
		}
		return p
	}
	ours := load(0)
	// The probe's first test is the namespace: any inode no packet has.
	foreign := load(1)
	pe, err := peer.Load()
	if err != nil {
		netlab.SkipOrFail(b, "peer: %v", err)
	}
	b.Cleanup(func() { pe.Close() })
	sets := []struct {
		name  string
		progs map[string]*ebpf.Program
	}{{"nbs", ours.Programs()}, {"peer", pe.Programs()}, {"foreign", foreign.Programs()}}
	bpfstats.Enable(b)
	var kept [probe.Protos]uint64
	under := func(load string, run func()) {
		type sampled struct {
			set, hook string
			s         *bpfstats.Sampler
		}
		var ss []sampled
		for _, set := range sets {
			for _, hook := range slices.Sorted(maps.Keys(set.progs)) {
				ss = append(ss, sampled{set.name, hook, bpfstats.Start(b, set.progs[hook])})
			}
		}
		run()
		median := map[[2]string]float64{}
		for _, x := range ss {
			r, ok := x.s.Stop()
			if !ok {
				b.Logf("%s/%s/%s: did not run under this load", load, x.set, x.hook)
				continue
			}
			name := load + "/" + x.set + "/" + x.hook
			b.ReportMetric(r.MedianNs, name+"-ns/run")
			b.ReportMetric(r.MeanNs, name+"-mean-ns/run")
			b.ReportMetric(float64(r.Runs), name+"-runs")
			b.Logf("%-48s median %5.0f ns/run, mean %5.0f ns/run, %8d runs", name, r.MedianNs, r.MeanNs, r.Runs)
			median[[2]string{x.set, x.hook}] = r.MedianNs
		}
		for _, hook := range slices.Sorted(maps.Keys(pe.Programs())) {
			n, p := median[[2]string{"nbs", hook}], median[[2]string{"peer", hook}]
			if n > 0 && p > 0 {
				b.Logf("%s/%s: nbs/peer median ns/run %.2f", load, hook, n/p)
			}
		}
		// The probe keeps queue times for a sample of TCP segments and of
		// UDP sockets (probe.DefaultReadSample): whether this load's
		// reader socket is in the sample changes what sk_data_ready costs.
		st, err := ours.Stats()
		if err != nil {
			b.Fatal(err)
		}
		d := [2]uint64{st.Sampled[probe.TCP] - kept[probe.TCP], st.Sampled[probe.UDP] - kept[probe.UDP]}
		kept = st.Sampled
		b.Logf("%s: queue times kept (1 in %d sampled): %d tcp segments, %d udp datagrams", load, ours.ReadSample(), d[0], d[1])
	}
	for b.Loop() {
		// Programs on one tracepoint run in the order they were attached,
		// and the first to touch the skb pays its cache misses: each load
		// runs twice, the probe first and then the peer first.
		for _, order := range []string{"nbs-first", "peer-first"} {
			if order == "peer-first" {
				if err := ours.Detach(); err != nil {
					b.Fatal(err)
				}
				if err := ours.Attach(); err != nil {
					b.Fatal(err)
				}
			}
			// 100 Mbit/s of 1000-byte datagrams: 12.5k datagrams/s,
			// each stamped, queued and read.
			under(order+"/udp", func() {
				stop := txlab.UDPFlood(b, lab, lab.A, lab.B, lab.IPB, 1000, 100e6)
				time.Sleep(3 * time.Second)
				stop()
			})
			under(order+"/tcp", func() {
				stop := lab.Flood(b, 2)
				time.Sleep(3 * time.Second)
				stop()
			})
		}
	}
}
