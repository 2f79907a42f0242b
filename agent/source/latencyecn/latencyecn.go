// Package latencyecn is the latency/ecn/devices branch: CE marks received
// per device and per peer, from a per-packet BPF program the agent attaches
// only while latency/ecn is in trouble or an operator is looking
// (source.Adaptive).
package latencyecn

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/nbs-project/nbs/agent/catalog"
	probe "github.com/nbs-project/nbs/agent/probe/latencyecn"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/perdevice"
)

const capName = "bpf.latency.ecn"

// MaxDevices bounds the per-device children; devices beyond count in the
// parent only.
const MaxDevices = 16

// Options configure Open.
type Options struct {
	source.Env
}

type devKey struct{ netns, ifindex uint32 }

type device struct {
	name  string
	id    string // "" while it has no child
	total uint64 // CE marks since attached
	other uint64 // of which from peers without a child
	named int    // peers with a child
}

type peer struct {
	prev  uint64 // the kernel's count when last read
	total uint64 // CE marks since attached (the kernel's may restart: LRU)
	id    string // "" without a child
}

// Source reads CE marks per device and peer while attached.
type Source struct {
	*source.Triggered[*probe.Probe, probe.Stats]

	// Guarded by Triggered's lock.
	devs  map[devKey]*device
	peers map[probe.Peer]*peer
	ids   *perdevice.IDs // device child ids
	total uint64
}

// Open loads the program without attaching it, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{ids: perdevice.NewIDs(opts.Netns.Inode, MaxDevices)}
	s.reset()
	s.Triggered = source.NewTriggered(opts.Env, source.TriggeredSpec[*probe.Probe, probe.Stats]{
		Name: "latency/ecn/devices (bpf, triggered)", Capability: capName, Trigger: catalog.LatencyECN, Branch: catalog.LatencyECNDevices,
		What: "CE marks per device and peer",
		Load: func(netnsInode uint32, log *slog.Logger) (*probe.Probe, error) {
			return probe.Load(probe.Options{NetnsInode: netnsInode, Logger: log, BTF: opts.BTF})
		},
		Attached: s.attached,
		Detached: s.reset,
	})
	return s, nil
}

func (s *Source) reset() {
	s.devs, s.peers, s.total = map[devKey]*device{}, map[probe.Peer]*peer{}, 0
	s.ids.Reset()
}

// attached counts from the attachment.
func (s *Source) attached(p *probe.Probe) error {
	peers, err := p.Peers()
	if err != nil {
		return err
	}
	for pr, c := range peers {
		s.peers[pr] = &peer{prev: c.CE}
	}
	return nil
}

func (s *Source) Collect(context.Context) (source.Reading, error) {
	return s.WhileAttached(s.collect)
}

func (s *Source) collect(p *probe.Probe, r *source.Reading) error {
	peers, err := p.Peers()
	if err != nil {
		return fmt.Errorf("read CE marks: %w", err)
	}
	keys := make([]probe.Peer, 0, len(peers))
	for pr := range peers {
		keys = append(keys, pr)
	}
	// Stable naming: devices and peers in a fixed order.
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Netns != b.Netns {
			return a.Netns < b.Netns
		}
		if a.Ifindex != b.Ifindex {
			return a.Ifindex < b.Ifindex
		}
		return a.Addr.Less(b.Addr)
	})
	for _, pr := range keys {
		ce := peers[pr].CE
		st, ok := s.peers[pr]
		if !ok {
			st = &peer{}
			s.peers[pr] = st
		}
		d := ce - st.prev
		if ce < st.prev { // evicted and back while named: counted from zero
			d = ce
		}
		st.prev = ce
		if d == 0 {
			continue
		}
		st.total += d
		s.total += d
		dk := devKey{pr.Netns, pr.Ifindex}
		dv, ok := s.devs[dk]
		if !ok {
			dv = &device{name: pr.Device}
			s.devs[dk] = dv
		}
		dv.total += d
		if dv.id == "" {
			dv.id = s.ids.Assign(pr.Device, pr.Netns)
		}
		if st.id == "" && dv.named < catalog.ECNMaxPeers && st.total == d {
			st.id = catalog.MetricSegment(pr.Addr.String())
			dv.named++
		}
		if st.id == "" {
			dv.other += d
		}
	}
	// Peers the kernel's table evicted are forgotten unless they have a
	// child, so the agent holds no more than the table does (and the
	// named ones); one that comes back counts from zero.
	for pr, st := range s.peers {
		if _, ok := peers[pr]; !ok && st.id == "" {
			delete(s.peers, pr)
		}
	}
	r.Metrics = catalog.ECNDevicesTree()
	r.Counters = map[string]uint64{catalog.LatencyECNDevices: s.total}
	for dk, dv := range s.devs {
		if dv.id == "" {
			continue
		}
		m := catalog.ECNDevice(dv.id, dv.name, s.ids.Netns(dk.netns))
		r.Metrics = append(r.Metrics, m)
		r.Counters[m.ID] = dv.total
		if dv.other > 0 {
			o := catalog.ECNPeerOtherChild(dv.id)
			r.Metrics = append(r.Metrics, o)
			r.Counters[o.ID] = dv.other
		}
	}
	for pr, st := range s.peers {
		if st.id == "" {
			continue
		}
		dv := s.devs[devKey{pr.Netns, pr.Ifindex}]
		if dv == nil || dv.id == "" {
			continue
		}
		m := catalog.ECNPeer(dv.id, st.id, pr.Addr.String())
		r.Metrics = append(r.Metrics, m)
		r.Counters[m.ID] = st.total
	}
	return nil
}
