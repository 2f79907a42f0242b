// Package flows measures what the flow map costs the agent
// (bpf/flows.bpf.c, agent/probe/flows, agent/source/flows), beside a
// NetObserv-shaped per-flow tracker (bpf/test/netobserv_flows_peer.bpf.c: a
// per-CPU hash of 5-tuples updated per packet at tc) in the same run:
//
//	NBS_REQUIRE_BPF=1 go test -run '^$' -bench . -benchtime 1x ./bench/flows/
//
// BenchmarkConnectionEvents: BPF ns per run and per connection of both,
// under short, bulk and refused connections in the namespace lab (run-time
// statistics as in bench/dns, bench/bpfstats). BenchmarkCollectLive: one interval's end
// (iterator over the live sockets, generation switch, drain) with
// NBS_FLOWS_LIVE (default 8000) connections open. BenchmarkMapMemory: the
// kernel memory of both at 100,000 concurrent flows. BenchmarkAgentRSS:
// the user space of both (resident memory, Go heap) with 100,000 TCP
// connections open. The Go side of an interval is agent/source/flows'
// BenchmarkEdges.
package flows

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	probe "github.com/nbs-project/nbs/agent/probe/flows"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/flows/peer"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func loadOurs(b *testing.B) *probe.Probe {
	b.Helper()
	p, err := probe.Load(probe.Options{})
	if err != nil {
		netlab.SkipOrFail(b, "flows: %v", err)
	}
	b.Cleanup(func() { p.Close() })
	if err := p.Attach(); err != nil {
		netlab.SkipOrFail(b, "flows: %v", err)
	}
	return p
}

func loadPeer(b *testing.B, lab *netlab.Lab) *peer.Peer {
	b.Helper()
	pe, err := peer.Load()
	if err != nil {
		netlab.SkipOrFail(b, "peer: %v", err)
	}
	b.Cleanup(func() { pe.Close() })
	if err := lab.Do(lab.A, func() error {
		ifi, err := net.InterfaceByName("vA")
		if err != nil {
			return err
		}
		return pe.Attach(ifi.Index)
	}); err != nil {
		netlab.SkipOrFail(b, "peer: %v", err)
	}
	return pe
}

// server accepts in B; each connection reads 1 KB, answers 1 KB and reads
// to the end.
func server(b *testing.B, lab *netlab.Lab) netip.AddrPort {
	b.Helper()
	var ln net.Listener
	if err := lab.Do(lab.B, func() (err error) {
		lc := net.ListenConfig{}
		ln, err = lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(lab.IPB, 0).String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// exchange makes one connection from A: 1 KB each way, then close.
func exchange(lab *netlab.Lab, dst netip.AddrPort, keep bool) (net.Conn, error) {
	var c net.Conn
	if err := lab.Do(lab.A, func() (err error) {
		c, err = net.DialTimeout("tcp", dst.String(), 10*time.Second)
		return err
	}); err != nil {
		return nil, err
	}
	buf := make([]byte, 1024)
	if _, err := c.Write(buf); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		c.Close()
		return nil, err
	}
	if keep {
		return c, nil
	}
	return nil, c.Close()
}

// BenchmarkConnectionEvents: each set's programs' median ns per run, and
// their total BPF time per connection, under three loads: short
// connections (1 KB each way), bulk ones (16 MB from A) and refused
// connects (a reset each way). Both ends of each connection are on this
// host, so the state changes of both sockets count for ours; the peer sees each packet once, at A's interface, ingress or
// egress. Ours runs host-wide, so connections, retransmits and drops
// elsewhere on the machine during the run are in its raw runs too
// ("host-runs/conn"); "ns/conn" counts the runs the lab's connections
// caused (see each load), and the retransmits the lab's namespaces
// counted (TcpRetransSegs), at each program's median.
func BenchmarkConnectionEvents(b *testing.B) {
	lab := netlab.New(b)
	ours := loadOurs(b)
	pe := loadPeer(b, lab)
	dst := server(b, lab)
	bpfstats.Enable(b)
	sets := []struct {
		name  string
		progs map[string]*ebpf.Program
	}{{"nbs", ours.Programs()}, {"netobserv", pe.Programs()}}
	type sampled struct {
		set, hook string
		s         *bpfstats.Sampler
	}
	// under runs one load of conns connections; caused is how many runs
	// of each of our programs the lab's connections make, and opened and
	// failed what A's edges must count.
	under := func(load string, conns int, caused map[string]float64, opened, failed uint64, run func() error) {
		if _, err := ours.Collect(); err != nil {
			b.Fatal(err)
		}
		var ss []sampled
		for _, set := range sets {
			for _, hook := range slices.Sorted(maps.Keys(set.progs)) {
				ss = append(ss, sampled{set.name, hook, bpfstats.Start(b, set.progs[hook])})
			}
		}
		retrans0 := lab.Nstat(b, lab.A)["TcpRetransSegs"] + lab.Nstat(b, lab.B)["TcpRetransSegs"]
		if err := run(); err != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the last closes
		retrans := lab.Nstat(b, lab.A)["TcpRetransSegs"] + lab.Nstat(b, lab.B)["TcpRetransSegs"] - retrans0
		caused["flows_tcp_retransmit_skb"] = float64(retrans)
		perConn := map[string]float64{}
		runs := map[string]uint64{}
		for _, x := range ss {
			r, ok := x.s.Stop()
			if !ok {
				continue
			}
			b.ReportMetric(r.MedianNs, load+"/"+x.set+"/"+x.hook+"-ns/run")
			if x.set == "nbs" {
				perConn[x.set] += r.MedianNs * caused[x.hook] / float64(conns)
			} else {
				perConn[x.set] += r.MedianNs * float64(r.Runs) / float64(conns)
			}
			runs[x.set] += r.Runs
		}
		for _, set := range sets {
			b.ReportMetric(perConn[set.name], load+"/"+set.name+"-ns/conn")
			b.ReportMetric(float64(runs[set.name])/float64(conns), load+"/"+set.name+"-host-runs/conn")
		}
		iv, err := ours.Collect()
		if err != nil {
			b.Fatal(err)
		}
		var o, f uint64
		for _, e := range iv.Edges {
			if e.Netns == lab.Inode(b, lab.A) {
				o += e.Opened
				f += e.Failed
			}
		}
		if o != opened || f != failed {
			b.Errorf("%s: the edges counted %d connections opened and %d failed, want %d and %d", load, o, f, opened, failed)
		}
	}
	// Each connection: 10 state changes, 5 per socket.
	opens := func(conns int) map[string]float64 {
		return map[string]float64{"flows_inet_sock_set_state": 10 * float64(conns)}
	}
	const short = 2000
	under("short", short, opens(short), short, 0, func() error {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < short; i += 4 {
					if _, err := exchange(lab, dst, false); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	})
	const bulk, size = 8, 16 << 20
	under("bulk", bulk, opens(bulk), bulk, 0, func() error {
		for range bulk {
			c, err := exchange(lab, dst, true)
			if err != nil {
				return err
			}
			if _, err := io.CopyN(c, zeros{}, size); err != nil {
				c.Close()
				return err
			}
			if err := c.Close(); err != nil {
				return err
			}
		}
		return nil
	})
	// Refused connects: 2 state changes each (SYN_SENT and back to
	// CLOSE), a reset sent by B (no socket), one received by A, and the
	// SYN dropped in B (kfree_skb, no socket: left at once).
	const refused = 2000
	under("refused", refused, map[string]float64{"flows_inet_sock_set_state": 2 * refused, "flows_tcp_send_reset": refused,
		"flows_tcp_receive_reset": refused, "flows_kfree_skb": refused}, 0, refused, func() error {
		lab.ConnectRefused(b, lab.A, netip.AddrPortFrom(lab.IPB, lab.ClosedPort), refused)
		return nil
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func liveConns() int {
	if v, err := strconv.Atoi(os.Getenv("NBS_FLOWS_LIVE")); err == nil && v > 0 {
		return v
	}
	return 8000
}

// BenchmarkCollectLive times one interval's end with many connections
// open: the iterator visits each socket with flow state (both ends), then
// the generation switch (an RCU grace period) and the drain.
func BenchmarkCollectLive(b *testing.B) {
	n := liveConns()
	var lim unix.Rlimit
	// Both ends are in this process: two descriptors per connection.
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(2*n+1000) {
		lim.Cur = min(uint64(2*n+1000), lim.Max)
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(2*n+1000) {
			b.Skipf("RLIMIT_NOFILE %d is too low for %d connections (NBS_FLOWS_LIVE): %v", lim.Cur, n, err)
		}
	}
	lab := netlab.New(b)
	ours := loadOurs(b)
	dst := server(b, lab)
	conns := make([]net.Conn, 0, n)
	b.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := exchange(lab, dst, true)
		if err != nil {
			b.Fatalf("open connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	if _, err := ours.Collect(); err != nil {
		b.Fatal(err)
	}
	const rounds = 5
	var total time.Duration
	for range rounds {
		start := time.Now()
		iv, err := ours.Collect()
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if !iv.Live {
			b.Fatal("live connections not read")
		}
	}
	per := total / rounds
	b.ReportMetric(float64(per.Microseconds())/1000, "ms/collect")
	b.ReportMetric(float64(per.Nanoseconds())/float64(2*n), "ns/live-socket")
	b.Logf("%d live connections (%d sockets with flow state): %v per interval's end", n, 2*n, per)
}

// BenchmarkMapMemory: the kernel memory each design holds at 100,000
// concurrent flows. The peer's map is sized for them (per-CPU, so times
// the CPUs; preallocated, as NetObserv's). Ours holds fixed tables (the
// edges are per owner and peer, not per flow) plus socket storage per
// connection: its element and, per socket, the storage header, at the
// kernel's own struct sizes (BTF), rounded to kmalloc's size classes.
func BenchmarkMapMemory(b *testing.B) {
	const flows = 100000
	pe, err := peer.Load()
	if err != nil {
		netlab.SkipOrFail(b, "peer: %v", err)
	}
	defer pe.Close()
	ours, err := probe.Load(probe.Options{})
	if err != nil {
		netlab.SkipOrFail(b, "flows: %v", err)
	}
	defer ours.Close()
	peerBytes := memlock(b, pe.Flows())
	var fixed uint64
	for _, m := range ours.Maps() {
		fixed += memlock(b, m)
	}
	perSocket := socketStorageBytes(b)
	ourBytes := fixed + flows*perSocket
	b.ReportMetric(float64(peerBytes)/(1<<20), "netobserv-MiB")
	b.ReportMetric(float64(ourBytes)/(1<<20), "nbs-MiB")
	b.ReportMetric(float64(fixed)/(1<<20), "nbs-fixed-MiB")
	b.ReportMetric(float64(perSocket), "nbs-B/socket")
	b.Logf("at %d flows: netobserv-shaped map %d B (%d CPUs); ours %d B fixed + %d B per socket = %d B",
		flows, peerBytes, runtime.NumCPU(), fixed, perSocket, ourBytes)
}

// socketStorageBytes is what the kernel allocates for our socket storage
// per socket: its element and the storage header, at the kernel's own
// struct sizes (BTF), rounded to kmalloc's size classes.
func socketStorageBytes(b *testing.B) uint64 {
	b.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		netlab.SkipOrFail(b, "kernel BTF: %v", err)
	}
	size := func(name string) uint64 {
		var s *btf.Struct
		if err := spec.TypeByName(name, &s); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return uint64(s.Size)
	}
	return kmalloc(size("bpf_local_storage_elem")+probe.SockStateBytes) + kmalloc(size("bpf_local_storage"))
}

// memlock is what the kernel charges for a map (/proc/self/fdinfo).
func memlock(b *testing.B, m *ebpf.Map) uint64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no memlock in fdinfo")
	return 0
}

// kmalloc rounds n up to a kmalloc size class.
func kmalloc(n uint64) uint64 {
	for _, c := range []uint64{8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096} {
		if n <= c {
			return c
		}
	}
	return n
}
