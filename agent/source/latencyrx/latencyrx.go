// Package latencyrx is the latency/rx branch: receive-stack latency, from a
// packet's kernel RX timestamp to its socket's receive queue and from there
// to the application's read, per protocol. Its programs cost less than
// netstacklat's (every histogram a 1 in 16 sample: about a third of
// today's netstacklat a run, about half even timing every packet;
// BENCHMARKS.md), so they are attached always by default, within the
// overhead budget like every Adaptive source (source.Standing); with
// Options.Triggered they are attached only while the latency branch is in
// trouble or an operator is looking. While an operator has the node
// expanded they time every packet and socket (SetExpanded).
package latencyrx

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	probe "github.com/nbs-project/nbs/agent/probe/latencyrx"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/loglinear"
)

const capName = "bpf.latency.rx"

// Options configure Open.
type Options struct {
	source.Env
	// Triggered attaches the programs only while triggered or expanded
	// (--latency.rx.always=false); by default they are always attached.
	Triggered bool
	// ReadSample is the probe's 1-in-N sample (probe.Options,
	// --latency.rx.sample); 0 is probe.DefaultReadSample. An operator's
	// expand times every packet and socket while it lasts (SetExpanded).
	ReadSample int
}

// Source reads the receive latency histograms while attached.
type Source struct {
	*source.Triggered[*probe.Probe, probe.Stats]

	deltas [probe.Protos][probe.Kinds]bpfhist.Delta // guarded by Triggered's lock

	mu       sync.Mutex
	expanded bool
}

// SetExpanded times every packet and UDP socket (true) or the sample
// (false, Options.ReadSample), without reloading the programs
// (source.Expandable).
func (s *Source) SetExpanded(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on == s.expanded {
		return nil
	}
	n := 0 // the sample the probe was loaded with
	if on {
		n = 1
	}
	if err := s.WithProbe(func(p *probe.Probe) error { return p.SetReadSample(n) }); err != nil {
		return err
	}
	s.expanded = on
	return nil
}

// Expanded says whether every packet and socket is timed.
func (s *Source) Expanded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expanded
}

// ids names the histogram of each protocol and kind; Total has no child
// per protocol, only the branch's own histogram.
var ids = [probe.Protos][probe.Kinds]string{
	probe.TCP: {probe.Stack: catalog.LatencyRXStackTCP, probe.Read: catalog.LatencyRXReadTCP},
	probe.UDP: {probe.Stack: catalog.LatencyRXStackUDP, probe.Read: catalog.LatencyRXReadUDP},
}

// parents merges each kind over the protocols.
var parents = [probe.Kinds]string{
	probe.Stack: catalog.LatencyRXStack,
	probe.Read:  catalog.LatencyRXRead,
	probe.Total: catalog.LatencyRX,
}

// Open loads the programs without attaching them, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{}
	name := "latency/rx (bpf, always on)"
	if opts.Triggered {
		name = "latency/rx (bpf, triggered)"
	}
	s.Triggered = source.NewTriggered(opts.Env, source.TriggeredSpec[*probe.Probe, probe.Stats]{
		Name: name, Capability: capName, Trigger: catalog.Latency, Branch: catalog.LatencyRX,
		What: "receive latency", AlwaysOn: !opts.Triggered, Runs: runs,
		Load: func(netnsInode uint32, log *slog.Logger) (*probe.Probe, error) {
			return probe.Load(probe.Options{NetnsInode: netnsInode, Logger: log, BTF: opts.BTF, ReadSample: opts.ReadSample})
		},
		Attached: s.attached,
	})
	return s, nil
}

// runs are the programs' runs in scope by attach point, the keys of
// Programs; nil when every run is in scope (no --netns), so the agent
// charges the kernel's count.
func runs(st probe.Stats) map[string]uint64 {
	if !st.Scoped {
		return nil
	}
	m := make(map[string]uint64, len(probe.Hooks))
	for i, h := range probe.Hooks {
		m[h] = st.Runs[i]
	}
	return m
}

// attached counts from the attachment: what the maps held before is
// history already reported.
func (s *Source) attached(p *probe.Probe) error {
	hs, err := p.Histograms()
	if err != nil {
		return err
	}
	for proto := range probe.Protos {
		for kind := range probe.Kinds {
			s.deltas[proto][kind].Reset(hs[proto][kind])
		}
	}
	return nil
}

func (s *Source) Collect(context.Context) (source.Reading, error) {
	return s.WhileAttached(s.collect)
}

func (s *Source) collect(p *probe.Probe, r *source.Reading) error {
	hs, err := p.Histograms()
	if err != nil {
		return fmt.Errorf("read receive latency: %w", err)
	}
	r.Metrics = catalog.LatencyRXTree()
	r.Histograms = make(map[string]*loglinear.Histogram, len(r.Metrics))
	for _, id := range parents {
		r.Histograms[id] = loglinear.New()
	}
	for proto := range probe.Protos {
		for kind := range probe.Kinds {
			h := s.deltas[proto][kind].Next(hs[proto][kind])
			r.Histograms[parents[kind]].Merge(h)
			if id := ids[proto][kind]; id != "" {
				r.Histograms[id] = h
			}
		}
	}
	return nil
}
