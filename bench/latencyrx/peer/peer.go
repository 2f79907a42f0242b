package peer

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Peer is the netstacklat-shaped programs, loaded and attached.
type Peer struct {
	objs  peerObjects
	links []link.Link
}

// Load loads and attaches the peer's programs. The kernel's RX timestamps
// must be on (the receive-latency probe's Attach turns them on).
func Load() (*Peer, error) {
	spec, err := loadPeer()
	if err != nil {
		return nil, fmt.Errorf("parse the peer object: %w", err)
	}
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return nil, fmt.Errorf("read the TAI offset: %w", err)
	}
	if err := spec.Variables["tai_offset_ns"].Set(int64(tx.Tai) * int64(time.Second)); err != nil {
		return nil, fmt.Errorf("set the TAI offset: %w", err)
	}
	p := &Peer{}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the peer: %w", err)
	}
	for _, prog := range []*ebpf.Program{p.objs.PeerRxTcp, p.objs.PeerRxCopy, p.objs.PeerRxReady} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("attach the peer: %w", err), p.Close())
		}
		p.links = append(p.links, l)
	}
	return p, nil
}

// Programs returns the peer's programs by attach point.
func (p *Peer) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		"tcp_probe":               p.objs.PeerRxTcp,
		"skb_copy_datagram_iovec": p.objs.PeerRxCopy,
		"sk_data_ready":           p.objs.PeerRxReady,
	}
}

// Close detaches and frees the peer.
func (p *Peer) Close() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}
