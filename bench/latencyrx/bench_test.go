// Package latencyrx measures what the receive-latency programs
// (bpf/latencyrx.bpf.c) cost per run, under load in the namespace lab:
//
//	NBS_REQUIRE_BPF=1 go test -run '^$' -bench . -benchtime 1x ./bench/latencyrx/
//
// Run-time statistics are switched on with BPF_ENABLE_STATS (the counters
// kernel.bpf_stats_enabled=1 turns on, reference-counted and undone when the
// benchmark ends) and read with Program.Stats() every 100 ms during each
// load; the benchmark reports the median of those windows' ns/run, the mean
// over the load and the number of runs, per program and load.
package latencyrx

import (
	"slices"
	"testing"
	"time"

	probe "github.com/nbs-project/nbs/agent/probe/latencyrx"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

// BenchmarkReceive attaches the probe restricted to the receiving namespace
// B (agent --netns) and loads it with a UDP flood and a TCP bulk transfer
// from A; the tracepoints are machine-wide, so runs include other traffic,
// which leaves the programs after one compare.
func BenchmarkReceive(b *testing.B) {
	lab := netlab.New(b)
	p, err := probe.Load(probe.Options{NetnsInode: lab.Inode(b, lab.B)})
	if err != nil {
		netlab.SkipOrFail(b, "latencyrx: %v", err)
	}
	b.Cleanup(func() { p.Close() })
	if err := p.Attach(); err != nil {
		b.Fatal(err)
	}
	bpfstats.Enable(b)
	under := func(load string, run func()) {
		progs := p.Programs()
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range progs {
				if !yield(k) {
					return
				}
			}
		})
		ss := make([]*bpfstats.Sampler, len(names))
		for i, k := range names {
			ss[i] = bpfstats.Start(b, progs[k])
		}
		run()
		for i, k := range names {
			bpfstats.Report(b, ss[i], load+"/"+k)
		}
	}
	for b.Loop() {
		// 100 Mbit/s of 1000-byte datagrams: 12.5k datagrams/s, each
		// stamped, queued and read.
		under("udp", func() {
			stop := txlab.UDPFlood(b, lab, lab.A, lab.B, lab.IPB, 1000, 100e6)
			time.Sleep(3 * time.Second)
			stop()
		})
		under("tcp", func() {
			stop := lab.Flood(b, 2)
			time.Sleep(3 * time.Second)
			stop()
		})
	}
}
