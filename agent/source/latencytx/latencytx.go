// Package latencytx is the latency/tx branch: where a write's time goes on
// its way out (sendmsg → qdisc → driver → ACK), from sampled BPF TX
// timestamping. It needs BPF and Linux 6.15+; elsewhere the branch is
// absent and the capability says why.
package latencytx

import (
	"context"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	probe "github.com/nbs-project/nbs/agent/probe/latencytx"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/cgroupv2"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const capName = "bpf.latency.tx"

// Options configure Open.
type Options struct {
	// Env's AllNetns samples connections of every namespace; otherwise
	// only Netns's.
	source.Env
	// CgroupPath is the cgroup v2 directory whose processes' connections
	// are sampled; "" is the root of the hierarchy (the whole node).
	CgroupPath string
	// SampleEvery times 1 in this many connections; 0 turns the branch off.
	SampleEvery uint32
}

// Source reads the TX stage histograms.
type Source struct {
	probe  *probe.Probe // nil when unavailable
	why    string       // why unavailable, or what is missing
	deltas [probe.Stages]bpfhist.Delta
}

// Open loads and attaches the probe, or returns a source that reports
// nothing and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	log := opts.Log(catalog.LatencyTX)
	s := &Source{}
	switch {
	case opts.DisableBPF:
		s.why = source.BPFDisabled
		return s, nil
	case opts.SampleEvery == 0:
		s.why = "disabled by --tx-timestamping.sample=0"
		return s, nil
	}
	path := opts.CgroupPath
	if path == "" {
		root, err := cgroupv2.Root()
		if err != nil {
			s.why = err.Error()
			log.Warn("latency/tx: no cgroup v2 to attach to; TX timestamping off", "err", err)
			return s, nil
		}
		path = root
	}
	p, err := probe.Load(probe.Options{CgroupPath: path, NetnsInode: opts.BPFNetns(), SampleEvery: opts.SampleEvery, Logger: log, BTF: opts.BTF})
	if err != nil {
		s.why = err.Error()
		log.Warn("latency/tx: TX timestamping unavailable", "err", err)
		return s, nil
	}
	s.probe, s.why = p, p.Partial()
	// Count from now: the first report covers the first interval.
	if hs, err := p.Histograms(); err == nil {
		for i := range s.deltas {
			s.deltas[i].Reset(hs[i])
		}
	}
	return s, nil
}

func (s *Source) Name() string { return "latency/tx (bpf)" }

func (s *Source) Capabilities() []*nbsv1.Capability {
	if s.probe == nil {
		return []*nbsv1.Capability{{Name: capName, Available: false, Reason: s.why}}
	}
	return []*nbsv1.Capability{{Name: capName, Available: true, Reason: s.why}}
}

// Programs returns the probe's programs, nil when it is unavailable.
func (s *Source) Programs() map[string]*ebpf.Program {
	if s.probe == nil {
		return nil
	}
	return s.probe.Programs()
}

var stageIDs = [probe.Stages]string{
	probe.SendmsgToQdisc:  catalog.LatencyTXSendmsgToQdisc,
	probe.QdiscToDriver:   catalog.LatencyTXQdiscToDriver,
	probe.DriverToAck:     catalog.LatencyTXDriverToAck,
	probe.SendmsgToDriver: catalog.LatencyTX,
}

func (s *Source) Collect(context.Context) (source.Reading, error) {
	if s.probe == nil {
		return source.Reading{}, nil
	}
	hs, err := s.probe.Histograms()
	if err != nil {
		return source.Reading{}, fmt.Errorf("read TX stage histograms: %w", err)
	}
	r := source.Reading{Metrics: catalog.LatencyTXTree(), Histograms: make(map[string]*loglinear.Histogram, probe.Stages)}
	for i, id := range stageIDs {
		r.Histograms[id] = s.deltas[i].Next(hs[i])
	}
	return r, nil
}

// Stats returns the probe's counts (zero when unavailable).
func (s *Source) Stats() (probe.Stats, error) {
	if s.probe == nil {
		return probe.Stats{}, nil
	}
	return s.probe.Stats()
}

func (s *Source) Close() error {
	if s.probe == nil {
		return nil
	}
	return s.probe.Close()
}
