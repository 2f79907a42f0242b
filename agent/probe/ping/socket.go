package ping

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tsFlags ask for a software stamp when a request enters the qdisc layer
// (SCHED) and when the driver sends it (SND), both looped back on the error
// queue without the packet (TSONLY) and tagged with a key (OPT_ID), and a
// software stamp on every received reply.
const tsFlags = unix.SOF_TIMESTAMPING_TX_SCHED | unix.SOF_TIMESTAMPING_TX_SOFTWARE |
	unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE |
	unix.SOF_TIMESTAMPING_OPT_ID | unix.SOF_TIMESTAMPING_OPT_TSONLY

const (
	icmpEchoRequest   = 8
	icmpEchoReply     = 0
	icmp6EchoRequest  = 128
	icmp6EchoReply    = 129
	icmpHeaderLen     = 8
	pingGroupRangeDoc = "net.ipv4.ping_group_range does not include the agent's group " +
		"(set it to \"0 2147483647\", or run with CAP_NET_RAW for a raw socket)"
)

// openSocket runs inside the target namespace. It prefers a datagram ICMP
// socket; EACCES there means ping_group_range forbids it, and a raw socket
// is tried instead.
func openSocket(v6, forceRaw bool) (int, Mode, error) {
	family, proto := unix.AF_INET, unix.IPPROTO_ICMP
	if v6 {
		family, proto = unix.AF_INET6, unix.IPPROTO_ICMPV6
	}
	const flags = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC
	mode := ModeDgram
	var dgramErr error
	fd := -1
	if !forceRaw {
		var err error
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|flags, proto)
		if err != nil {
			dgramErr = err
		}
	}
	if fd < 0 {
		var err error
		fd, err = unix.Socket(family, unix.SOCK_RAW|flags, proto)
		if err != nil {
			if dgramErr != nil {
				if errors.Is(dgramErr, unix.EACCES) {
					return -1, 0, fmt.Errorf("icmp datagram socket: %s; raw socket: %w", pingGroupRangeDoc, err)
				}
				return -1, 0, fmt.Errorf("icmp datagram socket: %v; raw socket: %w", dgramErr, err)
			}
			return -1, 0, fmt.Errorf("raw icmp socket: %w", err)
		}
		mode = ModeRaw
		if err := filterEchoReplies(fd, v6); err != nil {
			unix.Close(fd)
			return -1, 0, err
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, tsFlags); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("SO_TIMESTAMPING: %w", err)
	}
	return fd, mode, nil
}

// filterEchoReplies keeps a raw socket from waking for every other ICMP
// message the host receives.
func filterEchoReplies(fd int, v6 bool) error {
	if !v6 {
		// ICMP_FILTER: a set bit drops that type.
		if err := unix.SetsockoptInt(fd, unix.SOL_RAW, unix.ICMP_FILTER, ^(1 << icmpEchoReply)); err != nil {
			return fmt.Errorf("ICMP_FILTER: %w", err)
		}
		return nil
	}
	// struct icmp6_filter: 256 bits, a set bit blocks that type.
	var f [8]uint32
	for i := range f {
		f[i] = ^uint32(0)
	}
	f[icmp6EchoReply>>5] &^= 1 << (icmp6EchoReply & 31)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 32)
	if err := unix.SetsockoptString(fd, unix.IPPROTO_ICMPV6, unix.ICMPV6_FILTER, string(b)); err != nil {
		return fmt.Errorf("ICMPV6_FILTER: %w", err)
	}
	return nil
}

// request builds an echo request. Datagram sockets fill in the id and the
// checksum themselves; raw ICMPv6 sockets compute the checksum (RFC 3542),
// raw ICMPv4 sockets need it here.
func (p *Pinger) request(buf []byte, seq uint16) []byte {
	pkt := buf[:icmpHeaderLen+p.opts.Size]
	clear(pkt[:icmpHeaderLen])
	pkt[0] = icmpEchoRequest
	if p.v6 {
		pkt[0] = icmp6EchoRequest
	}
	binary.BigEndian.PutUint16(pkt[4:], p.id)
	binary.BigEndian.PutUint16(pkt[6:], seq)
	for i := icmpHeaderLen; i < len(pkt); i++ {
		pkt[i] = byte(i)
	}
	if p.mode == ModeRaw && !p.v6 {
		binary.BigEndian.PutUint16(pkt[2:], checksum(pkt))
	}
	return pkt
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// reply parses a received datagram; ok is false for anything that is not an
// echo reply to this pinger.
func (p *Pinger) reply(b []byte) (seq uint16, ok bool) {
	if p.mode == ModeRaw && !p.v6 {
		// Raw IPv4 sockets return the IP header too.
		if len(b) < 20 || b[0]>>4 != 4 {
			return 0, false
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return 0, false
		}
		b = b[ihl:]
	}
	if len(b) < icmpHeaderLen {
		return 0, false
	}
	want := byte(icmpEchoReply)
	if p.v6 {
		want = icmp6EchoReply
	}
	if b[0] != want || b[1] != 0 {
		return 0, false
	}
	// A raw socket sees every echo reply the host receives; a datagram
	// socket only its own (the kernel rewrote the id to the socket's).
	if p.mode == ModeRaw && binary.BigEndian.Uint16(b[4:]) != p.id {
		return 0, false
	}
	return binary.BigEndian.Uint16(b[6:]), true
}

// stamp is a TX timestamp from the error queue.
type stamp struct {
	key  uint32
	kind uint32 // unix.SCM_TSTAMP_SCHED or SCM_TSTAMP_SND
	at   int64  // Unix nanoseconds (CLOCK_REALTIME)
}

// parseTxStamp reads one error-queue message's control data; ok is false
// for messages that are not timestamps (e.g. a queued ICMP error).
func parseTxStamp(oob []byte) (s stamp, ok bool) {
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return s, false
	}
	var haveTS, haveErr bool
	for _, c := range cms {
		switch {
		case c.Header.Level == unix.SOL_SOCKET && c.Header.Type == unix.SO_TIMESTAMPING:
			if at, ok := softwareStamp(c.Data); ok {
				s.at, haveTS = at, true
			}
		case (c.Header.Level == unix.SOL_IP && c.Header.Type == unix.IP_RECVERR) ||
			(c.Header.Level == unix.SOL_IPV6 && c.Header.Type == unix.IPV6_RECVERR):
			if len(c.Data) < int(unsafe.Sizeof(unix.SockExtendedErr{})) {
				continue
			}
			ee := (*unix.SockExtendedErr)(unsafe.Pointer(&c.Data[0]))
			if ee.Origin != unix.SO_EE_ORIGIN_TIMESTAMPING || ee.Errno != uint32(unix.ENOMSG) {
				continue
			}
			s.kind, s.key, haveErr = ee.Info, ee.Data, true
		}
	}
	return s, haveTS && haveErr
}

// rxStamp finds the software receive stamp of a reply.
func rxStamp(oob []byte) (int64, bool) {
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, c := range cms {
		if c.Header.Level == unix.SOL_SOCKET && c.Header.Type == unix.SO_TIMESTAMPING {
			return softwareStamp(c.Data)
		}
	}
	return 0, false
}

// softwareStamp reads ts[0] of struct scm_timestamping (three timespecs;
// the first is the software stamp, the others hardware).
func softwareStamp(d []byte) (int64, bool) {
	if len(d) < 16 {
		return 0, false
	}
	sec := int64(binary.NativeEndian.Uint64(d[0:8]))
	nsec := int64(binary.NativeEndian.Uint64(d[8:16]))
	if sec == 0 && nsec == 0 {
		return 0, false
	}
	return sec*int64(time.Second) + nsec, true
}

// optIDControl is a control message setting the timestamp key of one send
// (SCM_TS_OPT_ID, Linux 6.13+), so the key never depends on guessing which
// failed sends consumed one.
func optIDControl(buf []byte, key uint32) []byte {
	n := unix.CmsgSpace(4)
	b := buf[:n]
	clear(b)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_SOCKET
	h.Type = unix.SCM_TS_OPT_ID
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], key)
	return b
}
