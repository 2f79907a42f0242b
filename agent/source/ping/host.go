package ping

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/netns"
)

// Clock is the kernel clock discipline's state (adjtimex, read-only).
type Clock struct {
	Synced   bool
	Offset   time.Duration
	MaxError time.Duration
}

// ReadClock asks the kernel whether its clock is synchronised. Reading
// (modes 0) needs no privilege; the clock is the same in every network
// namespace.
func ReadClock() (Clock, error) {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return Clock{}, fmt.Errorf("adjtimex: %w", err)
	}
	c := Clock{
		Synced:   state != unix.TIME_ERROR && tx.Status&unix.STA_UNSYNC == 0,
		Offset:   time.Duration(tx.Offset) * time.Microsecond,
		MaxError: time.Duration(tx.Maxerror) * time.Microsecond,
	}
	if tx.Status&unix.STA_NANO != 0 {
		c.Offset = time.Duration(tx.Offset)
	}
	return c, nil
}

// DetectAddress finds the primary IPv4 address of a namespace, the one
// peers should ping: the source address of its default route, or else the
// first global unicast IPv4 address on an interface that is up. It returns
// the zero Addr (and no error) when the namespace has none.
func DetectAddress(ns netns.Handle) (netip.Addr, error) {
	var found netip.Addr
	err := ns.Do(func() error {
		if a, ok := defaultRouteSource(); ok {
			found = a
			return nil
		}
		ifs, err := net.Interfaces()
		if err != nil {
			return fmt.Errorf("list interfaces: %w", err)
		}
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				ipn, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() && ip.IsGlobalUnicast() {
					found = ip.Unmap()
					return nil
				}
			}
		}
		return nil
	})
	return found, err
}

// defaultRouteSource asks the routing table which source address a packet
// to the outside would get: connecting a UDP socket sends nothing.
func defaultRouteSource() (netip.Addr, bool) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netip.Addr{}, false
	}
	defer unix.Close(fd)
	// TEST-NET-3 (RFC 5737): routed like any outside address, owned by no one.
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{203, 0, 113, 1}}); err != nil {
		return netip.Addr{}, false
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.Addr{}, false
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return netip.Addr{}, false
	}
	a := netip.AddrFrom4(in4.Addr)
	if !a.IsGlobalUnicast() {
		return netip.Addr{}, false
	}
	return a, true
}
