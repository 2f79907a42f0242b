// Package latencytx measures where the host spends a TCP write's time on its
// way out — sendmsg → qdisc → driver → ACK — with BPF TX timestamping
// (Linux 6.15+) for a sample of connections.
//
// A cgroup sockops program (bpf/latencytx.bpf.c) picks 1 in SampleEvery
// connections of the cgroup's processes when they are established and turns
// timestamping on for those only; a tp_btf program on tcp_sendmsg_locked
// marks when each write starts. Stage latencies are counted in kernel
// histograms in the shared log-linear layout; user space only reads.
package latencytx

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
)

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("tcp tx timestamping probe closed")

// Stage is one leg of a write's way out.
type Stage int

// The values are enum nbs_tx_stage of the BPF program.
const (
	SendmsgToQdisc  Stage = iota // start of the write → dev_queue_xmit (TCP write queue, cwnd, pacing)
	QdiscToDriver                // dev_queue_xmit → driver (qdisc queueing, device busy)
	DriverToAck                  // driver → the peer's ACK (network and peer)
	SendmsgToDriver              // start of the write → driver: the host's share
	Stages
)

func (s Stage) String() string {
	switch s {
	case SendmsgToQdisc:
		return "sendmsg_to_qdisc"
	case QdiscToDriver:
		return "qdisc_to_driver"
	case DriverToAck:
		return "driver_to_ack"
	case SendmsgToDriver:
		return "sendmsg_to_driver"
	}
	return fmt.Sprintf("stage_%d", int(s))
}

// Options configure Load.
type Options struct {
	// CgroupPath is the cgroup v2 directory whose processes' connections
	// are sampled (with its descendants); cgroupv2.Root covers the node.
	CgroupPath string
	// NetnsInode restricts sampling to one network namespace; 0 samples
	// every namespace.
	NetnsInode uint32
	// SampleEvery times 1 in this many connections (1 = every one).
	SampleEvery uint32
	Logger      *slog.Logger
}

// Stats are the probe's event counts, cumulative, summed over CPUs. The
// fields are those of struct nbs_tx_stats in bpf/latencytx.bpf.c.
type Stats latencytxNbsTxStats

// objects are the parts of the BPF object every kernel with TX timestamping
// can load; the sendmsg tracepoint is loaded apart because it is newer.
type objects struct {
	Sockops *ebpf.Program `ebpf:"nbs_tx_sockops"`
	latencytxMaps
}

type sendmsgObjects struct {
	Sendmsg *ebpf.Program `ebpf:"nbs_tx_sendmsg"`
}

// Probe is the loaded and attached pair of programs.
type Probe struct {
	objs    objects
	sendmsg *ebpf.Program // nil when the kernel lacks tcp_sendmsg_locked
	links   []link.Link
	partial string

	mu     sync.Mutex
	closed bool
}

// Load checks the kernel, loads the programs and attaches them. A kernel
// without BPF TX timestamping gets an error saying so; one without the
// tcp_sendmsg_locked tracepoint gets a probe that starts each write's clock
// at the end of sendmsg instead (see Partial).
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.SampleEvery == 0 {
		return nil, errors.New("load tcp tx timestamping: SampleEvery must be at least 1")
	}
	if opts.CgroupPath == "" {
		return nil, errors.New("load tcp tx timestamping: no cgroup path")
	}
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("load tcp tx timestamping: read kernel BTF: %w", err)
	}
	var fn *btf.Func
	if err := kernel.TypeByName("bpf_sock_ops_enable_tx_tstamp", &fn); err != nil {
		return nil, fmt.Errorf("load tcp tx timestamping: kernel has no BPF TX timestamping (kfunc bpf_sock_ops_enable_tx_tstamp, Linux 6.15+): %w", err)
	}
	var tp *btf.Typedef
	haveSendmsg := kernel.TypeByName("btf_trace_tcp_sendmsg_locked", &tp) == nil

	spec, err := loadLatencytx()
	if err != nil {
		return nil, fmt.Errorf("parse tcp tx object: %w", err)
	}
	for name, val := range map[string]uint32{
		latencytxVarTargetNetns: opts.NetnsInode,
		latencytxVarSampleEvery: opts.SampleEvery,
	} {
		if err := spec.Variables[name].Set(val); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}

	p := &Probe{}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		logVerifier(log, err)
		return nil, fmt.Errorf("load tcp tx sockops program: %w (%s)", err, hint(err))
	}
	if haveSendmsg {
		var so sendmsgObjects
		err := spec.LoadAndAssign(&so, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
			latencytxMapTxSock: p.objs.TxSock, latencytxMapTxHist: p.objs.TxHist, latencytxMapTxStats: p.objs.TxStats,
		}})
		if err != nil {
			logVerifier(log, err)
			p.closeKernel()
			return nil, fmt.Errorf("load tcp_sendmsg_locked program: %w (%s)", err, hint(err))
		}
		p.sendmsg = so.Sendmsg
	} else {
		p.partial = "kernel has no tcp_sendmsg_locked tracepoint (Linux 6.11+): writes are timed from the end of sendmsg, so sendmsg_to_qdisc misses the copy"
		log.Warn("tcp tx timestamping: " + p.partial)
	}

	cg, err := link.AttachCgroup(link.CgroupOptions{Path: opts.CgroupPath, Attach: ebpf.AttachCGroupSockOps, Program: p.objs.Sockops})
	if err != nil {
		p.closeKernel()
		return nil, fmt.Errorf("attach sockops to cgroup %s: %w (%s)", opts.CgroupPath, err, hint(err))
	}
	p.links = append(p.links, cg)
	if p.sendmsg != nil {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.sendmsg, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			p.closeKernel()
			return nil, fmt.Errorf("attach tcp_sendmsg_locked: %w (%s)", err, hint(err))
		}
		p.links = append(p.links, l)
	}
	log.Info("tcp tx timestamping attached", "cgroup", opts.CgroupPath, "netns", opts.NetnsInode, "sample_every", opts.SampleEvery)
	return p, nil
}

func logVerifier(log *slog.Logger, err error) {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		log.Debug("tcp tx verifier log", "log", fmt.Sprintf("%+v", ve))
	}
}

func hint(err error) string {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return "needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, or root"
	}
	return "needs a kernel (6.15+) with BPF TX timestamping and cgroup v2"
}

// Partial says what the probe cannot measure on this kernel; empty when
// everything works.
func (p *Probe) Partial() string { return p.partial }

// Programs returns the loaded programs by attach point, for run-time
// statistics.
func (p *Probe) Programs() map[string]*ebpf.Program {
	m := map[string]*ebpf.Program{"sockops_tx_timestamping": p.objs.Sockops}
	if p.sendmsg != nil {
		m["tcp_sendmsg_locked"] = p.sendmsg
	}
	return m
}

// Histograms returns each stage's cumulative histogram, summed over CPUs.
func (p *Probe) Histograms() ([Stages]bpfhist.Hist, error) {
	var out [Stages]bpfhist.Hist
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return out, fmt.Errorf("read tcp tx histograms: %w", ErrClosed)
	}
	for s := Stage(0); s < Stages; s++ {
		h, _, err := bpfhist.Lookup(p.objs.TxHist, uint32(s))
		if err != nil {
			return out, fmt.Errorf("read tcp tx histogram %s: %w", s, err)
		}
		out[s] = h
	}
	return out, nil
}

// Stats returns the probe's event counts.
func (p *Probe) Stats() (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Stats{}, fmt.Errorf("read tcp tx stats: %w", ErrClosed)
	}
	var per []Stats
	if err := p.objs.TxStats.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("read tcp tx stats: %w", err)
	}
	var sum Stats
	sv := reflect.ValueOf(&sum).Elem()
	for i := range per {
		v := reflect.ValueOf(per[i])
		for f := 0; f < v.NumField(); f++ {
			if v.Field(f).Kind() == reflect.Uint64 {
				sv.Field(f).SetUint(sv.Field(f).Uint() + v.Field(f).Uint())
			}
		}
	}
	return sum, nil
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.closeKernel()
}

func (p *Probe) closeKernel() error {
	var errs []error
	for _, l := range p.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach tcp tx program: %w", err))
		}
	}
	p.links = nil
	// Close tolerates the nil programs and maps of a partial load.
	for _, c := range []interface{ Close() error }{p.sendmsg, p.objs.Sockops, p.objs.TxHist, p.objs.TxSock, p.objs.TxStats} {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close tcp tx objects: %w", err))
		}
	}
	return errors.Join(errs...)
}
