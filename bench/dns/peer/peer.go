// Package peer is the NetObserv-shaped DNS tracker
// (bpf/test/netobserv_dns_peer.bpf.c) that bench/dns measures beside the
// dns probe in the same run.
package peer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Peer is the NetObserv-shaped program, loaded and attached.
type Peer struct {
	objs peerObjects
	link link.Link
}

// Load loads the peer and attaches it to tracepoint net_dev_queue, where
// NetObserv attaches its tracker (as a raw tracepoint: see the program).
func Load() (*Peer, error) {
	p := &Peer{}
	if err := loadPeerObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the peer: %w", err)
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "net_dev_queue", Program: p.objs.PeerDnsTrace})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("attach the peer: %w", err), p.objs.Close())
	}
	p.link = l
	return p, nil
}

// Programs returns the peer's program by attach point.
func (p *Peer) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{"net_dev_queue": p.objs.PeerDnsTrace}
}

// Matched returns how many responses the peer matched to their queries.
func (p *Peer) Matched() (uint64, error) {
	var per []peerPeerDnsResult
	if err := p.objs.PeerDnsResults.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read the peer's results: %w", err)
	}
	var n uint64
	for _, r := range per {
		n += r.Matched
	}
	return n, nil
}

// Close detaches and frees the peer.
func (p *Peer) Close() error {
	return errors.Join(p.link.Close(), p.objs.Close())
}
