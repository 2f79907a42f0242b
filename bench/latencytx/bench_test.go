// Package latencytx measures what the BPF programs of latency/tx (always
// on) and of latency/qdisc and latency/flows (triggered) cost per run,
// under load in the namespace lab:
//
//	NBS_REQUIRE_BPF=1 go test -run '^$' -bench . -benchtime 1x ./bench/latencytx/
//
// Run-time statistics are switched on with BPF_ENABLE_STATS (the counters
// kernel.bpf_stats_enabled=1 turns on, reference-counted and undone when
// the benchmark ends) and read with Program.Stats() every 100 ms during each
// load; the benchmark reports the median of those windows' ns/run, the mean
// over the load and the number of runs, per program and load, and the same
// for the floor of the always-on tcp_sendmsg_locked (an empty program at
// that tracepoint, bench/floor).
package latencytx

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/latencyflows"
	"github.com/nbs-project/nbs/agent/probe/latencyqdisc"
	"github.com/nbs-project/nbs/agent/probe/latencytx"
	"github.com/nbs-project/nbs/bench/bpfstats"
	"github.com/nbs-project/nbs/bench/floor"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

func TestMain(m *testing.M) {
	txlab.MaybeHelper()
	os.Exit(m.Run())
}

type rig struct {
	lab   *netlab.Lab
	cg    *txlab.Cgroup
	sink  *txlab.Sink
	progs map[string]*ebpf.Program
}

// setup builds the lab and loads every program: TX timestamping on the
// test cgroup sampling 1 in sampleEvery connections, qdisc sojourn and
// per-flow sampling attached, all restricted to namespace A like an agent
// started with --netns.
func setup(b *testing.B, sampleEvery uint32) *rig {
	b.Helper()
	bpfstats.Enable(b)
	r := &rig{lab: netlab.New(b), progs: map[string]*ebpf.Program{}}
	r.cg = txlab.NewCgroup(b)
	ns := r.lab.Inode(b, r.lab.A)
	tx, err := latencytx.Load(latencytx.Options{CgroupPath: r.cg.Path, NetnsInode: ns, SampleEvery: sampleEvery})
	if err != nil {
		netlab.SkipOrFail(b, "%v", err)
	}
	b.Cleanup(func() { tx.Close() })
	qd, err := latencyqdisc.Load(latencyqdisc.Options{NetnsInode: ns})
	if err != nil {
		netlab.SkipOrFail(b, "%v", err)
	}
	b.Cleanup(func() { qd.Close() })
	fl, err := latencyflows.Load(latencyflows.Options{NetnsInode: ns})
	if err != nil {
		netlab.SkipOrFail(b, "%v", err)
	}
	b.Cleanup(func() { fl.Close() })
	if err := qd.Attach(); err != nil {
		b.Fatal(err)
	}
	if err := fl.Attach(); err != nil {
		b.Fatal(err)
	}
	for _, ps := range []map[string]*ebpf.Program{tx.Programs(), qd.Programs(), fl.Programs()} {
		for k, p := range ps {
			r.progs[k] = p
		}
	}
	// The floor of the always-on tcp_sendmsg_locked: an empty program at
	// the same tracepoint (bench/floor), sampled beside it.
	flr, err := floor.Load()
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	b.Cleanup(func() { flr.Close() })
	floors, err := flr.Attach("tcp_sendmsg_locked")
	if err != nil {
		netlab.SkipOrFail(b, "floor: %v", err)
	}
	r.progs["floor/tcp_sendmsg_locked"] = floors["tcp_sendmsg_locked"]
	r.sink = txlab.NewSink(b, r.lab, r.lab.B, r.lab.IPB)
	return r
}

// under runs load while sampling every program.
func (r *rig) under(b *testing.B, load string, run func()) {
	b.Helper()
	names := make([]string, 0, len(r.progs))
	for k := range r.progs {
		names = append(names, k)
	}
	slices.Sort(names)
	ss := make([]*bpfstats.Sampler, len(names))
	for i, k := range names {
		ss[i] = bpfstats.Start(b, r.progs[k])
	}
	run()
	b.Logf("load %s:", load)
	for i, k := range names {
		bpfstats.Report(b, ss[i], load+"/"+k)
	}
}

func loads(b *testing.B, r *rig) {
	r.under(b, "spaced", func() {
		r.cg.Send(b, r.lab.A, txlab.SendSpec{Dst: r.sink.Addr, Messages: 3000, Size: 1000, Gap: time.Millisecond})
	})
	r.under(b, "bulk", func() {
		r.cg.Send(b, r.lab.A, txlab.SendSpec{Dst: r.sink.Addr, Conns: 4, Size: 64 << 10, Duration: 3 * time.Second})
	})
	r.lab.Exec(b, r.lab.A, "tc", "qdisc", "replace", "dev", "vA", "root", "tbf", "rate", "10mbit", "burst", "1mbit", "latency", "400ms")
	r.under(b, "tbf", func() {
		r.cg.Send(b, r.lab.A, txlab.SendSpec{Dst: r.sink.Addr, Conns: 4, Size: 64 << 10, Duration: 3 * time.Second})
	})
	r.lab.Exec(b, r.lab.A, "tc", "qdisc", "del", "dev", "vA", "root")
}

// Every connection of the cgroup sampled (--tx-timestamping.sample=1): the
// cost per timestamped write and per packet.
func BenchmarkSampleAll(b *testing.B) {
	r := setup(b, 1)
	for b.Loop() {
		loads(b, r)
	}
}

// No connection sampled (1 in 2^20): what the always-on programs cost every
// other socket of the node.
func BenchmarkSampleNone(b *testing.B) {
	r := setup(b, 1<<20)
	for b.Loop() {
		loads(b, r)
	}
}
