package latencytx

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/latencytx"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

// BenchmarkSendCost measures what a send of a socket TX timestamping does
// not sample pays for the always-on tcp_sendmsg_locked program, and what
// the kernel's BPF run-time statistics add to that: the time per 1-byte
// write on a corked TCP connection from lab namespace A to B (each write
// runs tcp_sendmsg_locked once, copies a byte and transmits nothing until a
// segment fills) with no program (the anchor), with the probe loaded and
// attached as the agent runs it (every namespace, 1 in 64; this
// connection was opened before it, so it is never sampled), and with the
// probe and statistics on. The three alternate in each round; each figure
// is the best of 15 loops of 100,000 writes (the least disturbed by other
// work on the machine).
func BenchmarkSendCost(b *testing.B) {
	lab := netlab.New(b)
	cg := txlab.NewCgroup(b)
	sink := txlab.NewSink(b, lab, lab.B, lab.IPB)
	var conn net.Conn
	if err := lab.Do(lab.A, func() (err error) {
		conn, err = net.DialTimeout("tcp", sink.Addr.String(), 5*time.Second)
		return err
	}); err != nil {
		b.Fatalf("dial the sink: %v", err)
	}
	defer conn.Close()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) }); err != nil || serr != nil {
		b.Fatalf("TCP_CORK: %v %v", err, serr)
	}
	const writes = 100_000
	one := []byte{0}
	perWrite := func() float64 {
		best := time.Duration(1<<63 - 1)
		for range 15 {
			n := 0
			start := time.Now()
			err := raw.Write(func(fd uintptr) bool {
				for n < writes {
					if _, err := unix.Write(int(fd), one); err != nil {
						if errors.Is(err, syscall.EAGAIN) {
							return false // wait for the sink to drain
						}
						serr = err
						return true
					}
					n++
				}
				return true
			})
			if err != nil || serr != nil {
				b.Fatalf("write: %v %v", err, serr)
			}
			best = min(best, time.Since(start))
		}
		return float64(best.Nanoseconds()) / writes
	}
	load := func() *latencytx.Probe {
		p, err := latencytx.Load(latencytx.Options{CgroupPath: cg.Path, SampleEvery: 64})
		if err != nil {
			netlab.SkipOrFail(b, "%v", err)
		}
		return p
	}
	const rounds = 3
	for range b.N {
		var none, probe, stats []float64
		for range rounds {
			none = append(none, perWrite())
			p := load()
			probe = append(probe, perWrite())
			prog := p.Programs()["tcp_sendmsg_locked"]
			if prog == nil {
				p.Close()
				netlab.SkipOrFail(b, "no tcp_sendmsg_locked program: %s", p.Partial())
			}
			if st, err := prog.Stats(); err != nil || st.RunCount != 0 {
				p.Close()
				b.Fatalf("the program's runs were counted (%v, %v): statistics are on for something else on this machine (a running agent?)", st, err)
			}
			on, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				p.Close()
				netlab.SkipOrFail(b, "BPF_ENABLE_STATS: %v", err)
			}
			stats = append(stats, perWrite())
			st, err := prog.Stats()
			on.Close()
			p.Close()
			if err != nil || st.RunCount < writes {
				b.Fatalf("the program ran %v times under statistics (%v), want at least %d: it does not run on every send", st, err, writes)
			}
		}
		b.Logf("ns per 1-byte corked write (%d rounds): no program %.0f; tcp_sendmsg_locked attached %.0f; and statistics on %.0f",
			rounds, none, probe, stats)
		b.ReportMetric(bpfstats.Median(none), "ns/write_none")
		b.ReportMetric(bpfstats.Median(probe), "ns/write_probe")
		b.ReportMetric(bpfstats.Median(stats), "ns/write_probe+stats")
	}
}
