package drops

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
)

// link is one device's statistics.
type link struct {
	index int32
	name  string
	stats map[string]uint64 // by catalog.DeviceCounter.Kernel
}

// rtnl_link_stats64's fields in order (include/uapi/linux/if_link.h); a
// kernel may send more at the end, never fewer of these.
var stats64Fields = []string{
	"rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped",
	"multicast", "collisions", "rx_length_errors", "rx_over_errors", "rx_crc_errors", "rx_frame_errors",
	"rx_fifo_errors", "rx_missed_errors", "tx_aborted_errors", "tx_carrier_errors", "tx_fifo_errors",
	"tx_heartbeat_errors", "tx_window_errors",
}

// readLinks dumps the devices of the current thread's namespace with
// their IFLA_STATS64, as `ip -s -s link` does: one netlink request for
// every counter of every device. Call it inside the namespace.
func readLinks() ([]link, error) {
	b, err := syscall.NetlinkRIB(unix.RTM_GETLINK, unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("dump links: %w", err)
	}
	return parseLinks(b)
}

func parseLinks(b []byte) ([]link, error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil, fmt.Errorf("parse link dump: %w", err)
	}
	want := map[string]bool{}
	for _, c := range catalog.DeviceCounters() {
		want[c.Kernel] = true
	}
	var out []link
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		l := link{index: int32(binary.NativeEndian.Uint32(m.Data[4:8]))}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return nil, fmt.Errorf("parse attributes of link %d: %w", l.index, err)
		}
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.IFLA_IFNAME:
				l.name = string(bytes.TrimRight(a.Value, "\x00"))
			case unix.IFLA_STATS64:
				if len(a.Value) < 8*len(stats64Fields) {
					return nil, fmt.Errorf("link %d: IFLA_STATS64 of %d bytes, want %d", l.index, len(a.Value), 8*len(stats64Fields))
				}
				l.stats = make(map[string]uint64, len(want))
				for i, f := range stats64Fields {
					if want[f] {
						l.stats[f] = binary.NativeEndian.Uint64(a.Value[8*i:])
					}
				}
			}
		}
		if l.name != "" && l.stats != nil {
			out = append(out, l)
		}
	}
	return out, nil
}
