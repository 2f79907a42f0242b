package evidence

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Decode reads one ring record into T, the bpf2go type of the program's
// event struct.
func Decode[T any](raw []byte) (T, error) {
	var v T
	if _, err := binary.Decode(raw, binary.NativeEndian, &v); err != nil {
		return v, fmt.Errorf("decode %d bytes: %w", len(raw), err)
	}
	return v, nil
}

// AddrPort builds an address from an event's 16 address bytes as BPF
// programs write them (IPv4 in the first 4); IPv4-mapped IPv6 addresses are
// shown as IPv4. The zero AddrPort means the kernel gave no address.
func AddrPort(family uint16, b [16]byte, port uint16) netip.AddrPort {
	switch family {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), port)
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), port)
	}
	return netip.AddrPort{}
}

// Clock turns bpf_ktime_get_ns() stamps (CLOCK_MONOTONIC) into wall time.
// The offset is taken once: a later clock step or suspend shifts event
// times by that much, never their order.
type Clock struct{ monoToUnix int64 }

// NewClock measures realtime - CLOCK_MONOTONIC, bracketing the monotonic
// read with two realtime reads.
func NewClock() Clock {
	var ts unix.Timespec
	before := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for CLOCK_MONOTONIC
	after := time.Now()
	return Clock{monoToUnix: before.UnixNano() + after.Sub(before).Nanoseconds()/2 - ts.Nano()}
}

// Time is the wall time of a kernel monotonic stamp.
func (c Clock) Time(monoNs uint64) time.Time { return time.Unix(0, int64(monoNs)+c.monoToUnix) }

// ClockWithOffset is a Clock with a known realtime - monotonic offset, for
// decoding recorded events (and tests) deterministically.
func ClockWithOffset(d time.Duration) Clock { return Clock{monoToUnix: d.Nanoseconds()} }
