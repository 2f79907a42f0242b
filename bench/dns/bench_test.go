// Package dns measures what the DNS programs (bpf/dns.bpf.c) cost per run,
// under load in the namespace lab, beside a NetObserv-shaped DNS tracker
// (bpf/test/netobserv_dns_peer.bpf.c) attached to the same tracepoint in
// the same run:
//
//	NBS_REQUIRE_BPF=1 go test -run '^$' -bench . -benchtime 1x ./bench/dns/
//
// Run-time statistics are read as in bench/latencyrx (bench/bpfstats): the
// median of 100 ms windows' ns/run, the mean over the load and the runs,
// per program and load.
package dns

import (
	"context"
	"encoding/binary"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	probe "github.com/nbs-project/nbs/agent/probe/dns"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/dns/peer"
	"github.com/nbs-project/nbs/bench/floor"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

// BenchmarkDNS attaches the probe (every namespace, as the agent runs it)
// and the peer, and loads them with traffic that is not DNS (a UDP flood,
// a TCP bulk transfer: every run leaves after the port test) and with DNS
// queries back to back from A to a server in B (every query and answer
// is matched).
func BenchmarkDNS(b *testing.B) {
	lab := netlab.New(b)
	// The floor (an empty program at each hook, bench/floor) first: it
	// reads nothing, so it changes nobody's cache misses.
	fl, err := floor.Load()
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	b.Cleanup(func() { fl.Close() })
	at, err := fl.Attach("net_dev_queue", "netif_receive_skb")
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	// By the probe's names of its hooks, to pair with its programs.
	floors := map[string]*ebpf.Program{probe.HookQuery: at["net_dev_queue"], probe.HookAnswer: at["netif_receive_skb"]}
	ours, err := probe.Load(probe.Options{})
	if err != nil {
		netlab.SkipOrFail(b, "dns: %v", err)
	}
	b.Cleanup(func() { ours.Close() })
	if err := ours.Attach(); err != nil {
		b.Fatal(err)
	}
	pe, err := peer.Load()
	if err != nil {
		netlab.SkipOrFail(b, "peer: %v", err)
	}
	b.Cleanup(func() { pe.Close() })
	sets := []struct {
		name  string
		progs map[string]*ebpf.Program
	}{{"nbs", ours.Programs()}, {"peer", pe.Programs()}, {"floor", floors}}
	bpfstats.Enable(b)
	var answered, matched uint64
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
			b.Logf("%-44s median %5.0f ns/run, mean %5.0f ns/run, %8d runs", name, r.MedianNs, r.MeanNs, r.Runs)
			median[[2]string{x.set, x.hook}] = r.MedianNs
		}
		n, p := median[[2]string{"nbs", probe.HookQuery}], median[[2]string{"peer", "net_dev_queue"}]
		if n > 0 && p > 0 {
			b.Logf("%s/net_dev_queue: nbs/peer median ns/run %.2f", load, n/p)
		}
		for _, hook := range []string{probe.HookQuery, probe.HookAnswer} {
			if n, f := median[[2]string{"nbs", hook}], median[[2]string{"floor", hook}]; n > 0 && f > 0 {
				b.Logf("%s/%s: nbs/floor median ns/run %.2f", load, hook, n/f)
			}
		}
		st, err := ours.Stats()
		if err != nil {
			b.Fatal(err)
		}
		m, err := pe.Matched()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: answers matched: nbs %d, peer %d", load, st.Answers-answered, m-matched)
		answered, matched = st.Answers, m
	}
	server := serve(b, lab)
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
			under(order+"/dns", func() {
				n := queries(b, lab, server, 3*time.Second)
				b.Logf("%s/dns: %d queries answered in 3 s", order, n)
			})
		}
	}
}

// serve runs a DNS server in B that answers every query at once
// (NOERROR, the question echoed), until the benchmark ends.
func serve(b *testing.B, lab *netlab.Lab) netip.AddrPort {
	var c *net.UDPConn
	if err := lab.Do(lab.B, func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lab.IPB, 53)))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			buf[2] |= 0x80 // QR
			buf[3] = 0x80  // RA, NOERROR
			_, _ = c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	b.Cleanup(func() {
		c.Close()
		wg.Wait()
	})
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// queries asks server from A, one query at a time (each a new id), for d,
// and returns how many were answered.
func queries(b *testing.B, lab *netlab.Lab, server netip.AddrPort, d time.Duration) int {
	var c *net.UDPConn
	if err := lab.Do(lab.A, func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	q := []byte{0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		5, 'b', 'e', 'n', 'c', 'h', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1}
	buf := make([]byte, 1500)
	n := 0
	for id := uint16(1); ctx.Err() == nil; id++ {
		binary.BigEndian.PutUint16(q, id)
		if _, err := c.Write(q); err != nil {
			b.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			m, err := c.Read(buf)
			if err != nil {
				b.Fatalf("answer %d: %v", id, err)
			}
			if m >= 12 && binary.BigEndian.Uint16(buf) == id {
				break
			}
		}
		n++
	}
	return n
}
