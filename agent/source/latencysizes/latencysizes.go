// Package latencysizes is the latency/sizes branch: packet sizes per network
// device as the stack sends them, as the driver gets them and as the stack
// receives them, from per-packet BPF programs the agent attaches only while
// the latency branch is in trouble or an operator is looking
// (source.Adaptive).
package latencysizes

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	probe "github.com/nbs-project/nbs/agent/probe/latencysizes"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/perdevice"
	"github.com/nbs-project/nbs/internal/loglinear"
)

const capName = "bpf.latency.sizes"

// MaxDevices bounds the per-device children (three metrics each); devices
// beyond count in the parent only.
const MaxDevices = 16

// idleRetire is how many intervals without a packet retire a device's
// children (a removed device, a container gone); they come back if packets
// do.
const idleRetire = 30

// Options configure Open.
type Options struct {
	source.Env
}

// deltas are a device's histograms' deltas, by direction.
type deltas [3]bpfhist.Delta

// Source reads per-device sizes while attached.
type Source struct {
	*source.Triggered[*probe.Probe, probe.Stats]

	// Guarded by Triggered's lock.
	devs *perdevice.Devices[deltas]
}

// Open loads the programs without attaching them, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{devs: perdevice.NewDevices[deltas](opts.Netns.Inode, MaxDevices, idleRetire)}
	s.Triggered = source.NewTriggered(opts.Env, source.TriggeredSpec[*probe.Probe, probe.Stats]{
		Name: "latency/sizes (bpf, triggered)", Capability: capName, Trigger: catalog.Latency, Branch: catalog.LatencySizes,
		What: "packet sizes",
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
	for d, sz := range devs {
		delta := s.devs.State(d)
		for dir := range delta {
			delta[dir].Reset(sz.Hist[dir])
		}
	}
	return nil
}

func (s *Source) Collect(context.Context) (source.Reading, error) {
	return s.WhileAttached(s.collect)
}

func (s *Source) collect(p *probe.Probe, r *source.Reading) error {
	devs, err := p.Devices()
	if err != nil {
		return fmt.Errorf("read packet sizes: %w", err)
	}
	all := loglinear.New()
	r.Metrics = catalog.LatencySizesTree()
	r.Histograms = map[string]*loglinear.Histogram{catalog.LatencySizes: all}
	for _, d := range perdevice.Sorted(devs) {
		delta := s.devs.State(d)
		var hs [3]*loglinear.Histogram
		count := uint64(0)
		for dir := range hs {
			hs[dir] = delta[dir].Next(devs[d].Hist[dir])
			count += hs[dir].Count
		}
		all.Merge(hs[probe.Sent])
		c := s.devs.Next(d, count > 0)
		if c.ID == "" {
			continue
		}
		ms := catalog.SizesDevice(c.ID, d.Name, c.Netns)
		if c.Retired {
			for _, m := range ms {
				r.Retired = append(r.Retired, m.ID)
			}
			continue
		}
		r.Metrics = append(r.Metrics, ms...)
		// Every child gets a histogram, empty when idle, so it reads 0
		// rather than UNKNOWN. The catalogue lists them in the probe's
		// order of directions: sent, xmit, received.
		for dir, m := range ms {
			r.Histograms[m.ID] = hs[dir]
		}
	}
	return nil
}
