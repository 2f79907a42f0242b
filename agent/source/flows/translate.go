package flows

import (
	"net/netip"

	probe "github.com/nbs-project/nbs/agent/probe/flows"
	"github.com/nbs-project/nbs/internal/netns"
)

// maxChecked bounds the peers remembered as checked for translation; past
// it the memory starts over (each peer is checked again once).
const maxChecked = 65536

// translator finds the peers the node's connection tracking translates
// (DNAT: a Service's address to a backend) and splits the connections to
// them by the backend each went to. See docs/flow-map-agent.md, "DNAT".
//
// A client edge to a peer not known as translated is looked up once in the
// conntrack tables of its namespace and the node's (the host's): if any
// connection to it was translated, the probe keeps the edges to that peer
// per connection from then on (probe.MarkTranslated), and each interval
// each such connection is looked up by its own addresses and ports to name
// the backend. Connections of the interval a peer is found in are reported
// untranslated.
type translator struct {
	probe   markTranslated
	host    func() (netns.Handle, bool)
	path    func(inode uint32) (string, bool)
	checked map[peerKey]bool
	// dumps of the current collection, by namespace inode.
	dumps map[uint32]*ctTable
	// buf is conntrackTCP's for the current collection, made at its
	// first dump and shared by its others (it was made per dump), let go
	// at its end: a node without translation keeps no 256 KiB for it.
	buf []byte
}

// ctTable is one namespace's conntrack table: the reply source of each
// connection by its original tuple, and the original destinations of
// connections that were translated.
type ctTable struct {
	reply      map[ctTuple]netip.AddrPort
	translated map[netip.AddrPort]bool
}

type markTranslated interface {
	MarkTranslated(netns uint32, peer netip.AddrPort) error
}

type peerKey struct {
	netns uint32
	peer  netip.AddrPort
}

// table returns the conntrack table of a namespace, read once per
// collection; nil when it cannot be read.
func (tr *translator) table(h netns.Handle) *ctTable {
	if d, ok := tr.dumps[h.Inode]; ok {
		return d
	}
	d := &ctTable{translated: map[netip.AddrPort]bool{}}
	if tr.buf == nil {
		tr.buf = make([]byte, ctBufBytes)
	}
	if r, err := conntrackTCP(h, tr.buf); err == nil {
		d.reply = r
		for orig, to := range r {
			if orig.dst != to {
				d.translated[orig.dst] = true
			}
		}
	}
	tr.dumps[h.Inode] = d
	return d
}

// tables are the conntrack tables a connection of namespace ino may be
// tracked in: its own, then the node's.
func (tr *translator) tables(ino uint32) []*ctTable {
	var out []*ctTable
	if p, ok := tr.path(ino); ok {
		out = append(out, tr.table(netns.Handle{Path: p, Inode: ino}))
	}
	if h, ok := tr.host(); ok && h.Inode != ino {
		out = append(out, tr.table(h))
	}
	return out
}

// apply marks newly seen translated peers, and returns iv's edges with the
// per-connection ones named by their backend (in xlat, by index).
func (tr *translator) apply(iv probe.Interval) map[int]netip.AddrPort {
	tr.dumps = map[uint32]*ctTable{}
	defer func() { tr.buf = nil }()
	xlat := map[int]netip.AddrPort{}
	for i, e := range iv.Edges {
		if e.Role != probe.Client {
			continue
		}
		peer := netip.AddrPortFrom(e.Peer, e.PeerPort)

		if e.DNAT {
			orig := ctTuple{src: netip.AddrPortFrom(e.Local, e.LocalPort), dst: peer}
			for _, t := range tr.tables(e.Netns) {
				if to, ok := t.reply[orig]; ok {
					if to != peer {
						xlat[i] = to
					}
					break
				}
			}
			continue
		}
		k := peerKey{e.Netns, peer}
		if tr.checked[k] {
			continue
		}
		if len(tr.checked) >= maxChecked {
			tr.checked = map[peerKey]bool{}
		}
		tr.checked[k] = true
		if tr.translated(e.Netns, peer) {
			_ = tr.probe.MarkTranslated(e.Netns, peer) // full: stays untranslated
		}
	}
	return xlat
}

// translated says whether a connection to peer from namespace ino was
// translated to another address or port.
func (tr *translator) translated(ino uint32, peer netip.AddrPort) bool {
	for _, t := range tr.tables(ino) {
		if t.translated[peer] {
			return true
		}
	}
	return false
}
