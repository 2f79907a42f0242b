// Package latencysizes measures what the packet size programs
// (bpf/latencysizes.bpf.c) cost per run, under load in the namespace lab,
// beside netsize-shaped histograms (bpf/test/netsize_peer.bpf.c) attached
// to the same tracepoints in the same run:
//
//	NBS_REQUIRE_BPF=1 go test -v -run '^$' -bench . -benchtime 1x ./bench/latencysizes/
//
// Run-time statistics are read as in bench/latencyrx (bench/bpfstats): the
// median of 100 ms windows' ns/run, the mean over the load and the runs,
// per program and load.
package latencysizes

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	probe "github.com/nbs-project/nbs/agent/probe/latencysizes"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/latencysizes/peer"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

// The probe's hooks and the peer's at the same tracepoints.
var sameHook = map[string]string{
	probe.HookQueue:   "net_dev_queue",
	probe.HookXmit:    "net_dev_xmit",
	probe.HookReceive: "netif_receive_skb",
}

// BenchmarkSizes attaches the probe (every namespace, as the agent runs it)
// and the peer, and loads them with a TCP bulk transfer (GSO packets of
// tens of kilobytes, their ACKs) and a UDP flood (1,000-byte datagrams),
// from A to B; each load runs twice, the probe attached first and then the
// peer first (programs on one tracepoint run in the order they were
// attached, and the first to touch the skb pays its cache misses).
func BenchmarkSizes(b *testing.B) {
	lab := netlab.New(b)
	ours, err := probe.Load(probe.Options{})
	if err != nil {
		netlab.SkipOrFail(b, "latencysizes: %v", err)
	}
	b.Cleanup(func() { ours.Close() })
	pe, err := peer.Load()
	if err != nil {
		netlab.SkipOrFail(b, "peer: %v", err)
	}
	b.Cleanup(func() { pe.Close() })
	sets := []struct {
		name  string
		progs map[string]*ebpf.Program
	}{{"nbs", ours.Programs()}, {"peer", pe.Programs()}}
	bpfstats.Enable(b)
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
		median := map[string]float64{}
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
			median[x.set+"/"+x.hook] = r.MedianNs
		}
		for _, ourHook := range slices.Sorted(maps.Keys(sameHook)) {
			n, p := median["nbs/"+ourHook], median["peer/"+sameHook[ourHook]]
			if n > 0 && p > 0 {
				b.Logf("%s/%s: nbs/peer median ns/run %.2f", load, sameHook[ourHook], n/p)
			}
		}
	}
	for b.Loop() {
		for _, order := range []string{"nbs-first", "peer-first"} {
			first, second := func() error { return ours.Attach() }, pe.Attach
			if order == "peer-first" {
				first, second = pe.Attach, func() error { return ours.Attach() }
			}
			if err := first(); err != nil {
				b.Fatal(err)
			}
			if err := second(); err != nil {
				b.Fatal(err)
			}
			under(order+"/tcp", func() {
				stop := lab.Flood(b, 2)
				time.Sleep(3 * time.Second)
				stop()
			})
			under(order+"/udp", func() {
				stop := txlab.UDPFlood(b, lab, lab.A, lab.B, lab.IPB, 1000, 100e6)
				time.Sleep(3 * time.Second)
				stop()
			})
			if err := ours.Detach(); err != nil {
				b.Fatal(err)
			}
			if err := pe.Detach(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
