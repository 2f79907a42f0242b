package flows

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/netns"
)

// ctnetlink, as include/uapi/linux/netfilter/nfnetlink_conntrack.h has it.
const (
	ipctnlMsgCtGet = 1
	// IPCTNL_MSG_CT_GET_STATS: the namespace's table size
	// (CTA_STATS_GLOBAL_ENTRIES), without a walk of its entries.
	ipctnlMsgCtGetStats   = 5
	ctaStatsGlobalEntries = 1
	ctaTupleOrig          = 1
	ctaTupleReply         = 2
	ctaTupleIP            = 1
	ctaTupleProto         = 2
	ctaIPv4Src            = 1
	ctaIPv4Dst            = 2
	ctaIPv6Src            = 3
	ctaIPv6Dst            = 4
	ctaProtoNum           = 1
	ctaProtoSrcPort       = 2
	ctaProtoDstPort       = 3
	nlaTypeMask           = 0x3fff
	// maxConntrack bounds one dump: a node's table beyond it is read in
	// part (the connections not found stay untranslated).
	maxConntrack = 200000
)

// ctTuple is one direction of a tracked TCP connection.
type ctTuple struct {
	src, dst netip.AddrPort
}

// conntrackTCP lists the TCP connections the namespace's connection
// tracking holds, by their original direction, with the reply direction's
// source: for a DNAT'd connection, the backend it was translated to.
// buf receives the dump (ctBufBytes: a recvmsg of a dump returns at most
// a page's worth of messages, but the stats reply and large pages fit);
// the caller keeps it across namespaces and collections, so a collection
// does not allocate 256 KiB per table it reads.
func conntrackTCP(h netns.Handle, buf []byte) (map[ctTuple]netip.AddrPort, error) {
	out := map[ctTuple]netip.AddrPort{}
	err := h.Do(func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("open ctnetlink: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return fmt.Errorf("bind ctnetlink: %w", err)
		}
		// The connections of every namespace share one hash table, and a
		// dump walks all its buckets (nf_conntrack_buckets, 262,144 here)
		// for each namespace's: most of the flows source's CPU under a
		// stream. A namespace that tracks nothing (no NAT, no ct rule:
		// most of them) says so at the cost of a counter's read.
		if n, ok := conntrackCount(fd, buf); ok && n == 0 {
			return nil
		}
		if err := ctRequest(fd, ipctnlMsgCtGet, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, 1); err != nil {
			return fmt.Errorf("dump conntrack: %w", err)
		}
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				return fmt.Errorf("read conntrack: %w", err)
			}
			msgs, err := syscall.ParseNetlinkMessage(buf[:n])
			if err != nil {
				return fmt.Errorf("parse conntrack: %w", err)
			}
			for _, m := range msgs {
				switch m.Header.Type {
				case unix.NLMSG_DONE:
					return nil
				case unix.NLMSG_ERROR:
					if len(m.Data) >= 4 {
						if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
							return fmt.Errorf("dump conntrack: %w", unix.Errno(-e))
						}
					}
					return nil
				}
				if len(out) >= maxConntrack || len(m.Data) < 4 {
					continue
				}
				orig, reply, ok := parseCT(m.Data[4:])
				if ok {
					out[orig] = reply.src
				}
			}
		}
	})
	return out, err
}

// ctBufBytes is the size of conntrackTCP's buffer.
const ctBufBytes = 256 << 10

// ctRequest sends a ctnetlink request without attributes.
func ctRequest(fd int, msg uint16, flags uint16, seq uint32) error {
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_CTNETLINK<<8|msg)
	binary.NativeEndian.PutUint16(req[6:], flags)
	binary.NativeEndian.PutUint32(req[8:], seq)
	req[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC
	req[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	return unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// conntrackCount is how many connections the namespace of the ctnetlink
// socket fd tracks (all protocols); ok is false when the kernel does not
// say, and then the table must be read to know.
func conntrackCount(fd int, buf []byte) (n uint32, ok bool) {
	const seq = 2
	if ctRequest(fd, ipctnlMsgCtGetStats, unix.NLM_F_REQUEST, seq) != nil {
		return 0, false
	}
	got, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, false
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:got])
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Seq != seq || m.Header.Type != unix.NFNL_SUBSYS_CTNETLINK<<8|ipctnlMsgCtGetStats || len(m.Data) < 4 {
			continue
		}
		for typ, v := range attrs(m.Data[4:]) {
			if typ == ctaStatsGlobalEntries && len(v) == 4 {
				return binary.BigEndian.Uint32(v), true
			}
		}
	}
	return 0, false
}

// parseCT reads one conntrack entry's attributes: the original tuple and
// the reply's; ok only for TCP.
func parseCT(b []byte) (orig, reply ctTuple, ok bool) {
	var okO, okR bool
	for typ, v := range attrs(b) {
		switch typ {
		case ctaTupleOrig:
			orig, okO = parseTuple(v)
		case ctaTupleReply:
			reply, okR = parseTuple(v)
		}
	}
	return orig, reply, okO && okR
}

func parseTuple(b []byte) (ctTuple, bool) {
	var src, dst netip.Addr
	var sport, dport uint16
	proto := -1
	for typ, v := range attrs(b) {
		switch typ {
		case ctaTupleIP:
			for t, a := range attrs(v) {
				addr, ok := netip.AddrFromSlice(a)
				if !ok {
					continue
				}
				switch t {
				case ctaIPv4Src, ctaIPv6Src:
					src = addr
				case ctaIPv4Dst, ctaIPv6Dst:
					dst = addr
				}
			}
		case ctaTupleProto:
			for t, a := range attrs(v) {
				switch {
				case t == ctaProtoNum && len(a) == 1:
					proto = int(a[0])
				case t == ctaProtoSrcPort && len(a) == 2:
					sport = binary.BigEndian.Uint16(a)
				case t == ctaProtoDstPort && len(a) == 2:
					dport = binary.BigEndian.Uint16(a)
				}
			}
		}
	}
	if proto != unix.IPPROTO_TCP || !src.IsValid() || !dst.IsValid() {
		return ctTuple{}, false
	}
	return ctTuple{src: netip.AddrPortFrom(src.Unmap(), sport), dst: netip.AddrPortFrom(dst.Unmap(), dport)}, true
}

// attrs iterates netlink attributes (type without its flags, value).
func attrs(b []byte) func(func(uint16, []byte) bool) {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= unix.SizeofNlAttr {
			l := int(binary.NativeEndian.Uint16(b))
			t := binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask
			if l < unix.SizeofNlAttr || l > len(b) {
				return
			}
			if !yield(t, b[unix.SizeofNlAttr:l]) {
				return
			}
			al := (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
			if al > len(b) {
				return
			}
			b = b[al:]
		}
	}
}
