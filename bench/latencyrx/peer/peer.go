package peer

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/bench/peerload"
)

// Shape is which netstacklat a Peer is.
type Shape int

const (
	// Before2025 is netstacklat before May 2025: a per-CPU array of log2
	// buckets per hook, every packet of every protocol at sk_data_ready.
	Before2025 Shape = iota
	// Current is netstacklat as its source is now: one per-CPU hash of
	// (cgroup, ifindex, hook, bucket), two lookups a packet.
	Current
)

func (s Shape) String() string { return [...]string{"netstacklat-2024", "netstacklat-current"}[s] }

// Peer is one shape's programs, loaded; Attach attaches them.
type Peer struct {
	coll  *ebpf.Collection
	progs map[string]*ebpf.Program
	peerload.Links
}

// Load loads the programs of shape without attaching them.
func Load(shape Shape) (*Peer, error) {
	load, names := loadPeer, map[string]string{
		"tcp_probe": "peer_rx_tcp", "skb_copy_datagram_iovec": "peer_rx_copy", "sk_data_ready": "peer_rx_ready"}
	if shape == Current {
		load, names = loadCurrent, map[string]string{
			"tcp_probe": "cur_rx_tcp", "skb_copy_datagram_iovec": "cur_rx_copy", "sk_data_ready": "cur_rx_ready"}
	}
	spec, err := load()
	if err != nil {
		return nil, fmt.Errorf("parse the %s object: %w", shape, err)
	}
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return nil, fmt.Errorf("read the TAI offset: %w", err)
	}
	if err := spec.Variables["tai_offset_ns"].Set(int64(tx.Tai) * int64(time.Second)); err != nil {
		return nil, fmt.Errorf("set the TAI offset: %w", err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load the %s programs: %w", shape, err)
	}
	p := &Peer{coll: coll, progs: map[string]*ebpf.Program{}}
	for hook, name := range names {
		p.progs[hook] = coll.Programs[name]
	}
	return p, nil
}

// Attach attaches the programs (after whatever is attached at their
// hooks: programs at a tracepoint run in the order they were attached).
func (p *Peer) Attach() error { return p.Tracing(slices.Collect(maps.Values(p.progs))...) }

// Programs returns the programs by attach point.
func (p *Peer) Programs() map[string]*ebpf.Program { return p.progs }

// Close detaches and frees the programs.
func (p *Peer) Close() error {
	err := p.Detach()
	p.coll.Close()
	return err
}
