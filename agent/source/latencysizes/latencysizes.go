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
	"sort"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	probe "github.com/nbs-project/nbs/agent/probe/latencysizes"
	"github.com/nbs-project/nbs/agent/source"
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

type device struct {
	id    string // "" while it has no child
	delta [3]bpfhist.Delta
	idle  int // intervals without a packet
}

// Source reads per-device sizes while attached.
type Source struct {
	*source.Triggered[*probe.Probe, probe.Stats]
	own uint32 // the watched namespace: its devices go by name alone

	// Guarded by Triggered's lock.
	devs map[probe.Device]*device
	ids  map[string]bool // child ids in use
}

// Open loads the programs without attaching them, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{own: opts.Netns.Inode, devs: map[probe.Device]*device{}, ids: map[string]bool{}}
	s.Triggered = source.NewTriggered(opts.Env, source.TriggeredSpec[*probe.Probe, probe.Stats]{
		Name: "latency/sizes (bpf, triggered)", Capability: capName, Trigger: catalog.Latency, Branch: catalog.LatencySizes,
		What: "packet sizes",
		Load: func(netnsInode uint32, log *slog.Logger) (*probe.Probe, error) {
			return probe.Load(probe.Options{NetnsInode: netnsInode, Logger: log, BTF: opts.BTF})
		},
		Attached: s.attached,
		Detached: func() { s.devs, s.ids = map[probe.Device]*device{}, map[string]bool{} },
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
		dv := s.device(d)
		for dir := range dv.delta {
			dv.delta[dir].Reset(sz.Hist[dir])
		}
	}
	return nil
}

// device returns the state of d.
func (s *Source) device(d probe.Device) *device {
	dv, ok := s.devs[d]
	if !ok {
		dv = &device{}
		s.devs[d] = dv
	}
	return dv
}

// name gives d a child id, unless MaxDevices children exist already.
func (s *Source) name(d probe.Device, dv *device) {
	if dv.id != "" || len(s.ids) >= MaxDevices {
		return
	}
	base := catalog.MetricSegment(d.Name)
	if d.Netns != s.own {
		base = fmt.Sprintf("%s.ns%d", base, d.Netns)
	}
	id := base
	for n := 2; s.ids[id]; n++ { // names differing only in case, or reused
		id = fmt.Sprintf("%s.%d", base, n)
	}
	dv.id = id
	s.ids[id] = true
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
	keys := make([]probe.Device, 0, len(devs))
	for d := range devs {
		keys = append(keys, d)
	}
	// Stable naming when two devices compete for an id.
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Netns != keys[j].Netns {
			return keys[i].Netns < keys[j].Netns
		}
		return keys[i].Ifindex < keys[j].Ifindex
	})
	for _, d := range keys {
		dv := s.device(d)
		var hs [3]*loglinear.Histogram
		count := uint64(0)
		for dir := range hs {
			hs[dir] = dv.delta[dir].Next(devs[d].Hist[dir])
			count += hs[dir].Count
		}
		all.Merge(hs[probe.Sent])
		if count == 0 {
			dv.idle++
		} else {
			dv.idle = 0
			s.name(d, dv)
		}
		if dv.id == "" {
			continue
		}
		ms := catalog.SizesDevice(dv.id, d.Name, 0)
		if dv.idle > idleRetire {
			for _, m := range ms {
				r.Retired = append(r.Retired, m.ID)
			}
			delete(s.ids, dv.id)
			dv.id = ""
			continue
		}
		if d.Netns != s.own {
			ms = catalog.SizesDevice(dv.id, d.Name, d.Netns)
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
