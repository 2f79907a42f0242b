// Package peer is the ipecn-shaped CE counter (bpf/test/ipecn_peer.bpf.c)
// that bench/latencyecn measures beside the latencyecn probe in the same
// run.
package peer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/nbs-project/nbs/bench/peerload"
)

// Peer is the ipecn-shaped program, loaded.
type Peer struct {
	objs peerObjects
	peerload.Links
	reader *ringbuf.Reader
	done   chan struct{}
}

// Load loads the peer and starts reading its events (as bpftrace prints
// them), without attaching it.
func Load() (*Peer, error) {
	p := &Peer{done: make(chan struct{})}
	if err := loadPeerObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the peer: %w", err)
	}
	r, err := ringbuf.NewReader(p.objs.PeerEvents)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("read the peer's events: %w", err), p.objs.Close())
	}
	p.reader = r
	go func() {
		defer close(p.done)
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	}()
	return p, nil
}

// Programs returns the peer's program by tracepoint.
func (p *Peer) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{"netif_receive_skb": p.objs.PeerIpecn}
}

// Attach attaches the program.
func (p *Peer) Attach() error { return p.Tracing(p.objs.PeerIpecn) }

// CE returns how many CE packets the peer counted.
func (p *Peer) CE() (uint64, error) {
	return peerload.SumPerCPU(p.objs.PeerCe, 0, func(n uint64) uint64 { return n })
}

// Close detaches and frees the peer.
func (p *Peer) Close() error {
	err := errors.Join(p.Detach(), p.reader.Close())
	<-p.done
	return errors.Join(err, p.objs.Close())
}
