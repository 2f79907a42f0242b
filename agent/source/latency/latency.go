// Package latency is the always-on part of the latency branch: TCP
// retransmitted segments and retransmission timeouts from BPF (exact, in
// every watched namespace), or from /proc where BPF is unavailable; lost
// retransmissions, listen queue, socket memory and memory pressure counters
// from /proc/net/netstat; softnet drops and time squeeze from
// /proc/net/softnet_stat; congestion marks (latency/ecn, ecn.go) from
// /proc/net/netstat and /proc/net/snmp6.
package latency

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/catalog"
	probe "github.com/nbs-project/nbs/agent/probe/latency"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const (
	capBPF  = "bpf.latency.retransmits"
	capProc = "proc.latency"
	capECN  = "proc.latency.ecn"
)

// Options configure Open.
type Options struct {
	source.Env
	// SoftnetPath is /proc/net/softnet_stat unless set (tests).
	SoftnetPath string
}

// Source reads the always-on latency children.
type Source struct {
	ns       netns.Handle
	allNetns bool
	proc     *procnet.Reader
	probe    *probe.Probe // nil on /proc
	bpfWhy   string
	softnet  string
	log      *slog.Logger
	ecn      ecn
}

// Open loads the retransmit probe, or falls back to /proc and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{ns: opts.Netns, allNetns: opts.AllNetns, proc: opts.ProcReader(), softnet: opts.SoftnetPath,
		log: opts.Log(catalog.Latency), bpfWhy: source.BPFDisabled, ecn: ecn{why: "not read yet"}}
	if s.softnet == "" {
		s.softnet = "/proc/net/softnet_stat"
	}
	if !opts.DisableBPF {
		p, err := probe.Load(probe.Options{NetnsInode: opts.BPFNetns(), Logger: s.log, BTF: opts.BTF, PinDir: opts.PinDirOf("latency")})
		if err == nil {
			s.probe, s.bpfWhy = p, ""
		} else {
			s.bpfWhy = err.Error()
			s.log.Warn("latency: BPF unavailable, retransmits and RTOs from /proc counters of the watched namespace only", "err", err)
		}
	}
	if _, err := s.Collect(context.Background()); err != nil {
		if s.probe != nil {
			_ = s.probe.Close()
		}
		return nil, fmt.Errorf("latency: %w", err)
	}
	return s, nil
}

func (s *Source) Name() string {
	if s.probe != nil {
		return "latency (bpf)"
	}
	return "latency (/proc)"
}

func (s *Source) Capabilities() []*nbsv1.Capability {
	scope := "the namespace " + s.ns.String()
	if s.probe != nil && s.allNetns {
		scope = "the agent's own namespace only (retransmits and RTOs cover every namespace)"
	}
	proc := &nbsv1.Capability{Name: capProc, Available: true, Reason: "lost retransmits, listen, socket memory and " +
		"memory pressure counters from /proc/net/netstat of " + scope + "; softnet from /proc/net/softnet_stat (host-wide)"}
	if s.probe == nil {
		return []*nbsv1.Capability{{Name: capBPF, Available: false, Reason: s.bpfWhy + "; retransmits and RTOs from " +
			"TcpRetransSegs and TcpExtTCPTimeouts of the watched namespace"}, proc, s.ecnCapability()}
	}
	return []*nbsv1.Capability{{Name: capBPF, Available: true}, proc, s.ecnCapability()}
}

// Programs returns the BPF programs by tracepoint, nil on /proc.
func (s *Source) Programs() map[string]*ebpf.Program {
	if s.probe == nil {
		return nil
	}
	return s.probe.Programs()
}

// bpfCounted are the counters the probe counts where it runs: the root is
// the retransmits.
var bpfCounted = map[string]bool{catalog.Latency: true, catalog.LatencyRetransmits: true, catalog.LatencyRTO: true}

// Continues says whether a counter continues a previous agent's (see
// source.Continuing): the probe's, when it adopted that agent's pinned maps.
func (s *Source) Continues(id string) bool {
	return s.probe != nil && bpfCounted[id] && s.probe.Continued()
}

// SinceBoot says which counters are the kernel's own since boot (see
// source.SinceBoot): every one but the probe's.
func (s *Source) SinceBoot(id string) bool { return s.probe == nil || !bpfCounted[id] }

// Collect reads the counters: the probe's cumulative since its maps were
// made, the /proc ones as the kernel counts them since boot (the agent
// counts those from its start, or from the previous agent's last report).
func (s *Source) Collect(context.Context) (source.Reading, error) {
	c, err := s.proc.SNMP()
	if err != nil {
		return source.Reading{}, err
	}
	c6, err := s.proc.SNMP6()
	if err != nil {
		return source.Reading{}, err
	}
	sn, err := procnet.ReadSoftnet(s.softnet)
	if err != nil {
		return source.Reading{}, err
	}
	r := source.Reading{Metrics: catalog.LatencyTree(), Counters: make(map[string]uint64, len(catalog.LatencyProcCounters)+6)}
	for id, counter := range catalog.LatencyProcCounters {
		r.Counters[id] = c[counter]
	}
	r.Counters[catalog.LatencySoftnetDropped] = sn.Dropped + sn.FlowLimit
	r.Counters[catalog.LatencySoftnetSqueeze] = sn.TimeSqueeze
	if s.probe != nil {
		// Counted since the maps were made, in the namespaces the probe
		// watches.
		bc, err := s.probe.Counts()
		if err != nil {
			return source.Reading{}, err
		}
		r.Counters[catalog.LatencyRetransmits] = bc.Retransmits()
		r.Counters[catalog.LatencyRTO] = bc.RTOs
	}
	r.Counters[catalog.Latency] = r.Counters[catalog.LatencyRetransmits]
	r.Counters[catalog.LatencySocketDrops] = r.Counters[catalog.LatencySocketRcvQ] + r.Counters[catalog.LatencySocketBacklog] +
		r.Counters[catalog.LatencySocketPruned] + r.Counters[catalog.LatencySocketOFO]
	r.Counters[catalog.LatencySoftnet] = r.Counters[catalog.LatencySoftnetDropped] + r.Counters[catalog.LatencySoftnetSqueeze]
	s.addECN(&r, c, c6, s.readECNMode())
	return r, nil
}

func (s *Source) Close() error {
	if s.probe == nil {
		return nil
	}
	return s.probe.Close()
}
