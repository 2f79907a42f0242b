// Package peer is the NetObserv-shaped per-flow tracker
// (bpf/test/netobserv_flows_peer.bpf.c) that bench/flows measures beside the
// flows probe in the same run.
package peer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Peer is the NetObserv-shaped program, loaded and attached to one
// interface's ingress and egress (TCX), as NetObserv attaches to each.
type Peer struct {
	objs  peerObjects
	links []link.Link
}

// Load loads the peer; Attach attaches it.
func Load() (*Peer, error) {
	p := &Peer{}
	if err := loadPeerObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the peer: %w", err)
	}
	return p, nil
}

// Attach attaches to the interface ifindex of the calling thread's
// network namespace.
func (p *Peer) Attach(ifindex int) error {
	for _, a := range []struct {
		prog *ebpf.Program
		typ  ebpf.AttachType
	}{{p.objs.PeerFlowIngress, ebpf.AttachTCXIngress}, {p.objs.PeerFlowEgress, ebpf.AttachTCXEgress}} {
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: a.prog, Attach: a.typ})
		if err != nil {
			return fmt.Errorf("attach the peer: %w", err)
		}
		p.links = append(p.links, l)
	}
	return nil
}

// Programs returns the peer's programs by attach point.
func (p *Peer) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{"tc_ingress": p.objs.PeerFlowIngress, "tc_egress": p.objs.PeerFlowEgress}
}

// Flows is the peer's flow map.
func (p *Peer) Flows() *ebpf.Map { return p.objs.PeerFlows }

// Close detaches and frees the peer.
func (p *Peer) Close() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(append(errs, p.objs.Close())...)
}
