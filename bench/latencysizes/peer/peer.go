// Package peer is the netsize-shaped packet size histograms
// (bpf/test/netsize_peer.bpf.c) that bench/latencysizes measures beside the
// latencysizes probe in the same run.
package peer

import (
	"errors"
	"fmt"

	"maps"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/bench/peerload"
)

// Peer is the netsize-shaped programs, loaded.
type Peer struct {
	objs peerObjects
	peerload.Links
}

// Load loads the peer without attaching it.
func Load() (*Peer, error) {
	p := &Peer{}
	if err := loadPeerObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the peer: %w", err)
	}
	return p, nil
}

// Programs returns the peer's programs by tracepoint.
func (p *Peer) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		"net_dev_queue":     p.objs.PeerNetDevQueue,
		"net_dev_xmit":      p.objs.PeerNetDevXmit,
		"netif_receive_skb": p.objs.PeerNetifReceiveSkb,
	}
}

// Attach attaches the programs.
func (p *Peer) Attach() error { return p.Tracing(slices.Collect(maps.Values(p.Programs()))...) }

// Close detaches and frees the peer.
func (p *Peer) Close() error {
	return errors.Join(p.Detach(), p.objs.Close())
}
