// Package latencyqdisc is the latency/qdisc branch: qdisc sojourn per network
// device, from per-packet BPF programs the agent attaches only while the
// latency branch is in trouble or an operator is looking (source.Adaptive).
package latencyqdisc

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	probe "github.com/nbs-project/nbs/agent/probe/latencyqdisc"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
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

type device struct {
	id    string // "" while it has no child
	delta bpfhist.Delta
	idle  int // intervals without a packet
}

// Source reads per-device sojourn while attached.
type Source struct {
	probe *probe.Probe // nil when unavailable
	why   string
	own   uint32 // the watched namespace: its devices go by name alone
	log   *slog.Logger

	mu      sync.Mutex
	active  bool
	devs    map[probe.Device]*device
	ids     map[string]bool // child ids in use
	retired []string
}

// Open loads the programs without attaching them, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	log := opts.Log(catalog.LatencyQdisc)
	s := &Source{own: opts.Netns.Inode, log: log, devs: map[probe.Device]*device{}, ids: map[string]bool{}}
	if opts.DisableBPF {
		s.why = source.BPFDisabled
		return s, nil
	}
	p, err := probe.Load(probe.Options{NetnsInode: opts.BPFNetns(), Logger: log})
	if err != nil {
		s.why = err.Error()
		log.Warn("latency/qdisc: BPF unavailable; qdisc sojourn will not be measured", "err", err)
		return s, nil
	}
	s.probe = p
	return s, nil
}

func (s *Source) Name() string    { return "latency/qdisc (bpf, triggered)" }
func (s *Source) Trigger() string { return catalog.Latency }
func (s *Source) Branch() string  { return catalog.LatencyQdisc }

func (s *Source) Capabilities() []*nbsv1.Capability {
	if s.probe == nil {
		return []*nbsv1.Capability{{Name: capName, Available: false, Reason: s.why}}
	}
	return []*nbsv1.Capability{{Name: capName, Available: true, Reason: "attached only while triggered or expanded"}}
}

// Programs returns the probe's programs, nil when it is unavailable.
func (s *Source) Programs() map[string]*ebpf.Program {
	if s.probe == nil {
		return nil
	}
	return s.probe.Programs()
}

func (s *Source) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// SetActive attaches or detaches the programs. Detaching retires the
// branch's metrics, so they vanish rather than go UNKNOWN.
func (s *Source) SetActive(_ context.Context, on bool) error {
	if s.probe == nil {
		if on {
			return fmt.Errorf("qdisc sojourn unavailable: %s", s.why)
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if on == s.active {
		return nil
	}
	if !on {
		err := s.probe.Detach()
		s.active = false
		s.retired = append(s.retired, catalog.LatencyQdisc)
		s.devs, s.ids = map[probe.Device]*device{}, map[string]bool{}
		return err
	}
	if err := s.probe.Attach(); err != nil {
		return err
	}
	s.active = true
	// Count from the attachment.
	devs, err := s.probe.Devices()
	if err != nil {
		return err
	}
	for d, h := range devs {
		s.device(d).delta.Reset(h)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	r := source.Reading{Retired: s.retired}
	s.retired = nil
	if !s.active {
		return r, nil
	}
	devs, err := s.probe.Devices()
	if err != nil {
		return r, fmt.Errorf("read qdisc sojourn: %w", err)
	}
	all := loglinear.New()
	r.Metrics = catalog.LatencyQdiscTree()
	r.Histograms = map[string]*loglinear.Histogram{catalog.LatencyQdisc: all}
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
		h := dv.delta.Next(devs[d])
		all.Merge(h)
		if h.Count == 0 {
			dv.idle++
		} else {
			dv.idle = 0
			s.name(d, dv)
		}
		if dv.id == "" {
			continue
		}
		child := catalog.LatencyQdisc + "/" + dv.id
		if dv.idle > idleRetire {
			r.Retired = append(r.Retired, child)
			delete(s.ids, dv.id)
			dv.id = ""
			continue
		}
		netnsInode := uint32(0)
		if d.Netns != s.own {
			netnsInode = d.Netns
		}
		r.Metrics = append(r.Metrics, catalog.QdiscDevice(dv.id, d.Name, netnsInode))
		// Every child gets a histogram, empty when idle, so it reads 0
		// rather than UNKNOWN.
		r.Histograms[child] = h
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
