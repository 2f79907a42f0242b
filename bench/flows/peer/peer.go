// Package peer is the NetObserv-shaped per-flow tracker
// (bpf/test/netobserv_flows_peer.bpf.c) that bench/flows measures beside the
// flows probe in the same run.
package peer

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/bench/peerload"
)

// Peer is the NetObserv-shaped program, loaded and attached to one
// interface's ingress and egress (TCX), as NetObserv attaches to each.
type Peer struct {
	objs peerObjects
	peerload.Links
}

// Load loads the peer with its flow map sized for 100,000 flows, as
// built; Attach attaches it.
func Load() (*Peer, error) { return LoadSized(0) }

// LoadSized loads the peer with its flow map sized for maxFlows (0: as
// built), as NetObserv sizes its map by its cache setting.
func LoadSized(maxFlows uint32) (*Peer, error) {
	spec, err := loadPeer()
	if err != nil {
		return nil, fmt.Errorf("parse the peer: %w", err)
	}
	if maxFlows > 0 {
		spec.Maps["peer_flows"].MaxEntries = maxFlows
	}
	p := &Peer{}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the peer: %w", err)
	}
	return p, nil
}

// Attach attaches to the interface ifindex of the calling thread's
// network namespace.
func (p *Peer) Attach(ifindex int) error {
	return p.TCX(ifindex, p.objs.PeerFlowIngress, p.objs.PeerFlowEgress)
}

// Programs returns the peer's programs by attach point.
func (p *Peer) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{"tc_ingress": p.objs.PeerFlowIngress, "tc_egress": p.objs.PeerFlowEgress}
}

// Flows is the peer's flow map.
func (p *Peer) Flows() *ebpf.Map { return p.objs.PeerFlows }

// Close detaches and frees the peer.
func (p *Peer) Close() error { return errors.Join(p.Detach(), p.objs.Close()) }

// Record is one flow as NetObserv's user space forwards it (its
// model.Record, the fields this peer's map fills).
type Record struct {
	ID                         peerPeerFlowId
	Metrics                    peerPeerFlowMetrics
	TimeFlowStart, TimeFlowEnd time.Time
	Interface                  string
	AgentIP                    net.IP
}

// Evict is NetObserv's eviction (its FlowFetcher.LookupAndDeleteMap and
// MapTracer.evictFlows, run every few seconds): iterate the per-CPU map,
// delete each flow, join its CPUs' values in a map sized for the cache,
// then one Record per flow with the CPUs' metrics aggregated.
func (p *Peer) Evict(iface string, agentIP net.IP) ([]Record, error) {
	m := p.objs.PeerFlows
	flows := make(map[peerPeerFlowId][]peerPeerFlowMetrics, m.MaxEntries())
	var id peerPeerFlowId
	var per []peerPeerFlowMetrics
	it := m.Iterate()
	for it.Next(&id, &per) {
		if err := m.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("evict a flow: %w", err)
		}
		flows[id] = append(flows[id], per...)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("iterate the flows: %w", err)
	}
	now := time.Now()
	out := make([]Record, 0, len(flows))
	for id, per := range flows {
		r := Record{ID: id, Interface: iface, AgentIP: agentIP, TimeFlowEnd: now}
		for _, x := range per {
			if x.Packets == 0 {
				continue
			}
			if r.Metrics.Packets == 0 || x.StartMonoTimeTs < r.Metrics.StartMonoTimeTs {
				r.Metrics.StartMonoTimeTs = x.StartMonoTimeTs
			}
			r.Metrics.EndMonoTimeTs = max(r.Metrics.EndMonoTimeTs, x.EndMonoTimeTs)
			r.Metrics.Packets += x.Packets
			r.Metrics.Bytes += x.Bytes
			r.Metrics.Flags |= x.Flags
		}
		r.TimeFlowStart = now.Add(-time.Duration(r.Metrics.EndMonoTimeTs - r.Metrics.StartMonoTimeTs))
		out = append(out, r)
	}
	return out, nil
}
