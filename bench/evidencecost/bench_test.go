// Package evidencecost measures, in one run each, what the agent's evidence
// and drop counting cost per BPF run beside peer-shaped programs attached
// to the same hook:
//
//	NBS_REQUIRE_BPF=1 go test -run '^$' -bench . -benchtime 1x ./bench/evidencecost/
//
// BenchmarkEvidencePerEvent: resets at a rare rate (NBS_EVIDENCE_RATE a
// second, default 10, for NBS_EVIDENCE_SECONDS, default 10), every one
// emitting evidence, through the agent's tcp_send_reset program (rate
// limit, counters, ring record submitted without a wakeup) and a peer that
// only emits the same record, once with the wakeup the kernel does by
// default and once with BPF_RB_NO_WAKEUP; each ring has a reader like the
// agent's (the peer with wakeups: one blocked on the ring; without: one
// polling every evidence.PollPeriod).
//
// BenchmarkKfreeSkbPeer: a UDP flood to a closed port and into an nftables
// drop rule through the agent's kfree_skb program beside two programs
// counting drops the way cloudflare/ebpf_exporter's examples do
// (kfreepeer.bpf.c).
//
// Figures are the kernel's run-time statistics (run_time_ns / run_cnt):
// for BenchmarkEvidencePerEvent read just before and after each reset, the
// median over the resets that ran the program alone (each round's ratio to
// the no-wakeup peer is logged, with the load average); for
// BenchmarkKfreeSkbPeer as bench/bpfstats samples them.
package evidencecost

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/nbs-project/nbs/agent/probe/drops"
	"github.com/nbs-project/nbs/agent/probe/evidence"
	"github.com/nbs-project/nbs/agent/probe/tcpreset"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/floor"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// attach attaches a tp_btf program; close the link to detach it.
func attach(b *testing.B, p *ebpf.Program) link.Link {
	b.Helper()
	l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		netlab.SkipOrFail(b, "attach %s: %v", p, err)
	}
	return l
}

// variant is one program measured on its own: start attaches it and
// returns the program and its reader's count of events; stop detaches it.
type variant struct {
	name, metric string
	start        func() (*ebpf.Program, *atomic.Int64)
	stop         func()
}

// peerVariant loads the evidence peer with the given submit flags and
// reads its ring as the agent would: polling without wakeups, else blocked
// on the ring; each phase attaches it.
func peerVariant(b *testing.B, name, metric string, netns uint32, flags uint64) variant {
	spec, err := loadEvpeer()
	if err != nil {
		b.Fatal(err)
	}
	if err := spec.Variables["target_netns"].Set(netns); err != nil {
		b.Fatal(err)
	}
	if err := spec.Variables["submit_flags"].Set(flags); err != nil {
		b.Fatal(err)
	}
	var objs evpeerObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		netlab.SkipOrFail(b, "load the evidence peer: %v", err)
	}
	b.Cleanup(func() { _ = objs.Close() })
	rd, err := ringbuf.NewReader(objs.PeerEvents)
	if err != nil {
		b.Fatal(err)
	}
	var read atomic.Int64
	done := make(chan struct{})
	b.Cleanup(func() { _ = rd.Close(); <-done })
	go func() {
		defer close(done)
		var rec ringbuf.Record
		for {
			if flags != 0 {
				rd.SetDeadline(time.Now().Add(evidence.PollPeriod))
			}
			err := rd.ReadInto(&rec)
			switch {
			case err == nil:
				read.Add(1)
			case !errors.Is(err, os.ErrDeadlineExceeded):
				return
			}
		}
	}()
	var l link.Link
	return variant{name: name, metric: metric,
		start: func() (*ebpf.Program, *atomic.Int64) {
			l = attach(b, objs.PeerRstEvidence)
			return objs.PeerRstEvidence, &read
		},
		stop: func() { _ = l.Close() },
	}
}

// agentVariant loads the agent's reset probe for each phase, with its
// reader, as the agent runs it.
func agentVariant(b *testing.B, netns uint32) variant {
	var (
		p      *tcpreset.Probe
		cancel context.CancelFunc
		done   chan struct{}
	)
	return variant{name: "agent tcp_send_reset (counters, rate limit, evidence without wakeup)", metric: "agent",
		start: func() (*ebpf.Program, *atomic.Int64) {
			var err error
			if p, err = tcpreset.Load(tcpreset.Options{NetnsInode: netns}); err != nil {
				netlab.SkipOrFail(b, "tcpreset: %v", err)
			}
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			var read atomic.Int64
			done = make(chan struct{})
			go func() { defer close(done); _ = p.ReadEvents(ctx, func(tcpreset.Event) { read.Add(1) }) }()
			return p.Programs()["tcp_send_reset"], &read
		},
		stop: func() { cancel(); _ = p.Close(); <-done },
	}
}

func report(b *testing.B, s *bpfstats.Sampler, name string) bpfstats.Result {
	b.Helper()
	r, ok := s.Stop()
	if !ok {
		b.Fatalf("%s: the program never ran", name)
	}
	return r
}

// BenchmarkEvidencePerEvent measures each program alone in its phase, so
// none runs on caches another warmed; the phases rotate in order round by
// round (NBS_EVIDENCE_ROUNDS, default 3).
func BenchmarkEvidencePerEvent(b *testing.B) {
	rate, secs, rounds := envInt("NBS_EVIDENCE_RATE", 10), envInt("NBS_EVIDENCE_SECONDS", 5), envInt("NBS_EVIDENCE_ROUNDS", 3)
	l := netlab.New(b)
	ns := l.Inode(b, l.B)
	variants := []variant{
		agentVariant(b, ns),
		peerVariant(b, "peer, ring submit with wakeup", "peer_wakeup", ns, 0),
		peerVariant(b, "peer, ring submit with BPF_RB_NO_WAKEUP", "peer_nowakeup", ns, 1),
	}
	runVariants(b, l, variants, "peer_nowakeup", rate, secs, rounds)
}

// loadavg is /proc/loadavg's first three fields, for the log of a run.
func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:min(3, len(f))], " ")
}

// runVariants runs rounds of phases, one variant attached at a time, and
// reports each variant's ratio to the anchor's (the variant whose metric
// is anchor) round by round: the anchor's phase is in the same round, so
// the two met the same machine within seconds of each other.
func runVariants(b *testing.B, l *netlab.Lab, variants []variant, anchor string, rate, secs, rounds int) {
	bpfstats.Enable(b)
	for range b.N {
		b.Logf("load average before: %s", loadavg())
		perEvent, upper := make([][]float64, len(variants)), make([][]float64, len(variants))
		for r := range rounds {
			for k := range variants {
				i := (k + r) % len(variants)
				v := variants[i]
				prog, read := v.start()
				read0 := read.Load()
				first, err := prog.Stats()
				if err != nil {
					b.Fatal(err)
				}
				// Each reset alone: the program's statistics just before
				// and just after it (ResetNoSocket returns once the reset
				// was sent), so a run of the program for another
				// namespace's reset (other work on the machine) is seen
				// and left out rather than averaged in.
				var own []float64
				tick := time.NewTicker(time.Second / time.Duration(rate))
				for range rate * secs {
					<-tick.C
					st0, err := prog.Stats()
					if err != nil {
						b.Fatal(err)
					}
					l.ResetNoSocket(b, 1)
					st1, err := prog.Stats()
					if err != nil {
						b.Fatal(err)
					}
					if st1.RunCount-st0.RunCount == 1 {
						own = append(own, float64(st1.Runtime-st0.Runtime))
					}
				}
				tick.Stop()
				time.Sleep(2 * evidence.PollPeriod) // the last records reach the reader
				last, err := prog.Stats()
				if err != nil {
					b.Fatal(err)
				}
				events := read.Load() - read0
				v.stop()
				if events != int64(rate*secs) {
					b.Errorf("%s: %d events read, want %d", v.name, events, rate*secs)
				}
				if len(own) < rate*secs/2 {
					b.Fatalf("%s: only %d of %d resets ran the program alone", v.name, len(own), rate*secs)
				}
				// The headline is the median over the resets that ran the
				// program alone: robust to the rare preemption or host
				// stall inside one run (tens of µs, which would dominate
				// a mean of 50). All its time over the events emitted
				// (other namespaces' runs included) bounds it from above.
				perEvent[i] = append(perEvent[i], bpfstats.Median(own))
				upper[i] = append(upper[i], float64(last.Runtime-first.Runtime)/float64(max(events, 1)))
			}
		}
		for i, v := range variants {
			x := slices.Sorted(slices.Values(perEvent[i]))
			b.Logf("%s: ns of BPF time per evidence event at %d/s, %d rounds: medians over the resets %s (median %.0f); all time over events emitted %s",
				v.name, rate, rounds, fmtNs(perEvent[i]), x[len(x)/2], fmtNs(upper[i]))
			b.ReportMetric(x[len(x)/2], v.metric+"_ns/event")
		}
		a := slices.IndexFunc(variants, func(v variant) bool { return v.metric == anchor })
		for i, v := range variants {
			if a < 0 || i == a {
				continue
			}
			ratios := make([]float64, rounds)
			for r := range rounds {
				ratios[r] = perEvent[i][r] / perEvent[a][r]
			}
			b.Logf("%s / %s, round by round: %s (max %.2f)", v.metric, anchor, fmtRatios(ratios), slices.Max(ratios))
			b.ReportMetric(slices.Max(ratios), v.metric+"/"+anchor+"_max")
		}
		b.Logf("load average after: %s", loadavg())
	}
}

func fmtRatios(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(out, ", ")
}

func fmtNs(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(out, ", ")
}

// BenchmarkKfreeSkbPeer measures the agent's kfree_skb program beside the
// ebpf_exporter-shaped peers and the floor (an empty program at the same
// tracepoint, bench/floor), all attached in the same run. Programs at one
// tracepoint run in the order they were attached and the first to read the
// packet pays its cache misses, so the rounds alternate: the agent first,
// then the exporter's example first. The floor is attached before both and
// reads nothing.
func BenchmarkKfreeSkbPeer(b *testing.B) {
	l := netlab.New(b)
	l.Nft(b, l.B, `table inet nbs_bench {
	chain in {
		type filter hook input priority 0; policy accept;
		udp dport 7777 counter drop
	}
}`)
	fl, err := floor.Load()
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	defer fl.Close()
	floors, err := fl.Attach("kfree_skb")
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	var objs kfreepeerObjects
	if err := loadKfreepeerObjects(&objs, nil); err != nil {
		netlab.SkipOrFail(b, "load the kfree_skb peers: %v", err)
	}
	defer objs.Close()
	bpfstats.Enable(b)
	names := []struct{ name, metric string }{
		{"agent tp_btf/kfree_skb (every namespace, evidence 20/s)", "agent"},
		{"ebpf_exporter shape: tp_btf, headers, hash by (proto, port, reason)", "exporter"},
		{"ebpf_exporter shape: hash by reason", "exporter_reason"},
		{"floor: an empty tp_btf/kfree_skb program", "floor"},
	}
	rounds := envInt("NBS_EVIDENCE_ROUNDS", 4)
	for range b.N {
		b.Logf("load average before: %s", loadavg())
		medians := make([][]float64, len(names))
		for r := range rounds {
			agentFirst := r%2 == 0
			var ours *drops.Probe
			var links []link.Link
			loadOurs := func() {
				if ours, err = drops.Load(drops.Options{}); err != nil {
					netlab.SkipOrFail(b, "drops: %v", err)
				}
			}
			if agentFirst {
				loadOurs()
			}
			links = append(links, attach(b, objs.ExporterKfreeSkb), attach(b, objs.ExporterKfreeSkbReason))
			if !agentFirst {
				loadOurs()
			}
			progs := []*ebpf.Program{ours.Programs()["kfree_skb"], objs.ExporterKfreeSkb, objs.ExporterKfreeSkbReason, floors["kfree_skb"]}
			samplers := make([]*bpfstats.Sampler, len(progs))
			for i, p := range progs {
				samplers[i] = bpfstats.Start(b, p)
			}
			for _, port := range []uint16{9999, 7777} {
				l.SendUDP(b, l.A, netip.AddrPortFrom(l.IPB, port), 100_000, 64, 0)
			}
			order := "agent first"
			if !agentFirst {
				order = "exporter first"
			}
			for i, n := range names {
				r := report(b, samplers[i], n.name)
				b.Logf("%s, %s: %d runs, median %.0f ns/run, mean %.0f ns/run", n.name, order, r.Runs, r.MedianNs, r.MeanNs)
				medians[i] = append(medians[i], r.MedianNs)
			}
			for _, k := range links {
				_ = k.Close()
			}
			_ = ours.Close()
		}
		for i, n := range names {
			x := slices.Sorted(slices.Values(medians[i]))
			b.Logf("%s: median ns/run of %d rounds (agent first, exporter first, ...): %s", n.name, rounds, fmtNs(medians[i]))
			b.ReportMetric(x[len(x)/2], n.metric+"_ns/run")
		}
		for _, against := range []int{1, 3} {
			ratios := make([]float64, rounds)
			for r := range rounds {
				ratios[r] = medians[0][r] / medians[against][r]
			}
			b.Logf("agent / %s, round by round: %s (max %.2f)", names[against].metric, fmtRatios(ratios), slices.Max(ratios))
			b.ReportMetric(slices.Max(ratios), "agent/"+names[against].metric+"_max")
		}
		b.Logf("load average after: %s", loadavg())
	}
}
