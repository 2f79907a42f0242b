// Package peer is the ipecn-shaped CE counter (bpf/test/ipecn_peer.bpf.c)
// that bench/latencyecn measures beside the latencyecn probe in the same
// run.
package peer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// Peer is the ipecn-shaped program, loaded.
type Peer struct {
	objs   peerObjects
	link   link.Link
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
func (p *Peer) Attach() error {
	l, err := link.AttachTracing(link.TracingOptions{Program: p.objs.PeerIpecn, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		return fmt.Errorf("attach the peer: %w", err)
	}
	p.link = l
	return nil
}

// Detach detaches the program.
func (p *Peer) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	return err
}

// CE returns how many CE packets the peer counted.
func (p *Peer) CE() (uint64, error) {
	var per []uint64
	if err := p.objs.PeerCe.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read the peer's count: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Close detaches and frees the peer.
func (p *Peer) Close() error {
	err := errors.Join(p.Detach(), p.reader.Close())
	<-p.done
	return errors.Join(err, p.objs.Close())
}
