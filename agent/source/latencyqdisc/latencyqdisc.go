// Package latencyqdisc is the latency/qdisc branch: qdisc sojourn per network
// device, from per-packet BPF programs the agent attaches only while the
// latency branch is in trouble or an operator is looking (source.Adaptive).
package latencyqdisc

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	probe "github.com/nbs-project/nbs/agent/probe/latencyqdisc"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/perdevice"
	"github.com/nbs-project/nbs/internal/loglinear"
)

const capName = "bpf.latency.qdisc"

// MaxDevices bounds the per-device children; devices beyond count in the
// parent only.
const MaxDevices = 32

// idleRetire is how many intervals without a packet retire a device's child
// (a removed device, a container gone); it comes back if packets do.
const idleRetire = 30

// Options configure Open.
type Options struct {
	source.Env
}

// Source reads per-device sojourn while attached.
type Source struct {
	*source.Triggered[*probe.Probe, probe.Stats]

	// Guarded by Triggered's lock.
	devs *perdevice.Devices[bpfhist.Delta]
}

// Open loads the programs without attaching them, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{devs: perdevice.NewDevices[bpfhist.Delta](opts.Netns.Inode, MaxDevices, idleRetire)}
	s.Triggered = source.NewTriggered(opts.Env, source.TriggeredSpec[*probe.Probe, probe.Stats]{
		Name: "latency/qdisc (bpf, triggered)", Capability: capName, Trigger: catalog.Latency, Branch: catalog.LatencyQdisc,
		What: "qdisc sojourn",
		Load: func(netnsInode uint32, log *slog.Logger) (*probe.Probe, error) {
			return probe.Load(probe.Options{NetnsInode: netnsInode, Logger: log, BTF: opts.BTF})
		},
		Attached: s.attached,
		Detached: s.devs.Reset,
	})
	return s, nil
}

// attached counts from the attachment.
func (s *Source) attached(p *probe.Probe) error {
	devs, err := p.Devices()
	if err != nil {
		return err
	}
	for d, h := range devs {
		s.devs.State(d).Reset(h)
	}
	return nil
}

func (s *Source) Collect(context.Context) (source.Reading, error) {
	return s.WhileAttached(s.collect)
}

func (s *Source) collect(p *probe.Probe, r *source.Reading) error {
	devs, err := p.Devices()
	if err != nil {
		return fmt.Errorf("read qdisc sojourn: %w", err)
	}
	all := loglinear.New()
	r.Metrics = catalog.LatencyQdiscTree()
	r.Histograms = map[string]*loglinear.Histogram{catalog.LatencyQdisc: all}
	for _, d := range perdevice.Sorted(devs) {
		h := s.devs.State(d).Next(devs[d])
		all.Merge(h)
		c := s.devs.Next(d, h.Count > 0)
		if c.ID == "" {
			continue
		}
		child := catalog.LatencyQdisc + "/" + c.ID
		if c.Retired {
			r.Retired = append(r.Retired, child)
			continue
		}
		r.Metrics = append(r.Metrics, catalog.QdiscDevice(c.ID, d.Name, c.Netns))
		// Every child gets a histogram, empty when idle, so it reads 0
		// rather than UNKNOWN.
		r.Histograms[child] = h
	}
	return nil
}
