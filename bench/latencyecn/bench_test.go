// Package latencyecn measures what the per-device, per-peer ECN program
// (bpf/latencyecn.bpf.c) costs per run, under load in the namespace lab,
// beside an ipecn-shaped CE counter (bpf/test/ipecn_peer.bpf.c) attached
// to the same tracepoint in the same run:
//
//	NBS_REQUIRE_BPF=1 go test -v -run '^$' -bench . -benchtime 1x ./bench/latencyecn/
//
// Run-time statistics are read as in bench/latencyrx (bench/bpfstats): the
// median of 100 ms windows' ns/run, the mean over the load and the runs.
package latencyecn

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	probe "github.com/nbs-project/nbs/agent/probe/latencyecn"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/latencyecn/peer"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

// BenchmarkECN attaches the probe (every namespace, as the agent runs it)
// and the peer, and loads them from A to B with a UDP flood that is not
// ECN-capable (nearly every packet of a host without ECN: both leave after
// the header's test), a TCP bulk transfer (not ECN-capable either: A does
// not ask for it), and the UDP flood made ECN-capable by nftables in A with
// a quarter of it marked CE (every packet counted, by the probe per device
// and peer, by the peer when CE, with an event). Each load runs twice, the
// probe attached first and then the peer first.
func BenchmarkECN(b *testing.B) {
	lab := netlab.New(b)
	ours, err := probe.Load(probe.Options{})
	if err != nil {
		netlab.SkipOrFail(b, "latencyecn: %v", err)
	}
	b.Cleanup(func() { ours.Close() })
	pe, err := peer.Load()
	if err != nil {
		netlab.SkipOrFail(b, "peer: %v", err)
	}
	b.Cleanup(func() { pe.Close() })
	sets := []struct {
		name string
		prog *ebpf.Program
	}{{"nbs", ours.Programs()[probe.Hook]}, {"peer", pe.Programs()["netif_receive_skb"]}}
	bpfstats.Enable(b)
	inB := lab.Inode(b, lab.B)
	counts := func() (uint64, uint64) {
		peers, err := ours.Peers()
		if err != nil {
			b.Fatal(err)
		}
		var n uint64
		for pr, c := range peers {
			if pr.Netns == inB && pr.Addr == lab.IPA {
				n += c.CE
			}
		}
		m, err := pe.CE()
		if err != nil {
			b.Fatal(err)
		}
		return n, m
	}
	under := func(load string, run func()) {
		var ss []*bpfstats.Sampler
		for _, set := range sets {
			ss = append(ss, bpfstats.Start(b, set.prog))
		}
		n0, p0 := counts()
		run()
		n1, p1 := counts()
		var med [2]float64
		for i, s := range ss {
			r, ok := s.Stop()
			if !ok {
				b.Logf("%s/%s: did not run under this load", load, sets[i].name)
				continue
			}
			name := load + "/" + sets[i].name
			b.ReportMetric(r.MedianNs, name+"-ns/run")
			b.ReportMetric(r.MeanNs, name+"-mean-ns/run")
			b.ReportMetric(float64(r.Runs), name+"-runs")
			b.Logf("%-28s median %5.0f ns/run, mean %5.0f ns/run, %8d runs", name, r.MedianNs, r.MeanNs, r.Runs)
			med[i] = r.MedianNs
		}
		if med[0] > 0 && med[1] > 0 {
			b.Logf("%s: nbs/peer median ns/run %.2f; CE from A counted: nbs %d, peer %d (all namespaces)", load, med[0]/med[1], n1-n0, p1-p0)
		}
	}
	for b.Loop() {
		for _, order := range []string{"nbs-first", "peer-first"} {
			first, second := ours.Attach, pe.Attach
			if order == "peer-first" {
				first, second = pe.Attach, ours.Attach
			}
			if err := first(); err != nil {
				b.Fatal(err)
			}
			if err := second(); err != nil {
				b.Fatal(err)
			}
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
			lab.Nft(b, lab.A, fmt.Sprintf(`table inet nbs_ecn { chain out { type filter hook output priority 0; policy accept;
  ip daddr %s meta l4proto udp ip ecn set ect0
  ip daddr %s meta l4proto udp numgen random mod 4 == 0 ip ecn set ce
}
}`, lab.IPB, lab.IPB))
			under(order+"/udp-ecn", func() {
				stop := txlab.UDPFlood(b, lab, lab.A, lab.B, lab.IPB, 1000, 100e6)
				time.Sleep(3 * time.Second)
				stop()
			})
			lab.NftDelete(b, lab.A, "nbs_ecn")
			if err := ours.Detach(); err != nil {
				b.Fatal(err)
			}
			if err := pe.Detach(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
