// Package peer is the NetObserv-shaped DNS tracker
// (bpf/test/netobserv_dns_peer.bpf.c) that bench/dns measures beside the
// dns probe in the same run.
package peer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/bench/peerload"
)

// Peer is the NetObserv-shaped program, loaded and attached.
type Peer struct {
	objs peerObjects
	peerload.Links
}

// Load loads the peer and attaches it to tracepoint net_dev_queue, where
// NetObserv attaches its tracker (as a raw tracepoint: see the program).
func Load() (*Peer, error) {
	p := &Peer{}
	if err := loadPeerObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the peer: %w", err)
	}
	if err := p.RawTracepoint("net_dev_queue", p.objs.PeerDnsTrace); err != nil {
		return nil, errors.Join(err, p.objs.Close())
	}
	return p, nil
}

// Programs returns the peer's program by attach point.
func (p *Peer) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{"net_dev_queue": p.objs.PeerDnsTrace}
}

// Matched returns how many responses the peer matched to their queries.
func (p *Peer) Matched() (uint64, error) {
	return peerload.SumPerCPU(p.objs.PeerDnsResults, 0, func(r peerPeerDnsResult) uint64 { return r.Matched })
}

// Close detaches and frees the peer.
func (p *Peer) Close() error {
	return errors.Join(p.Detach(), p.objs.Close())
}
