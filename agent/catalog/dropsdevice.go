package catalog

import "fmt"

// drops/device: the devices' own statistics (IFLA_STATS64). Not in the
// drops headline: they overlap the reasons (a veth's peer down is both
// tx_dropped and a freed skb) or lie below the stack, in hardware, where no
// reason exists.
const DropsDevice = "drops/device"

// DeviceChildrenMax bounds the device children of each drops/device
// counter; devices beyond count in the counter only.
const DeviceChildrenMax = 32

// DeviceCounter is one child of drops/device: the counter of struct
// rtnl_link_stats64 (IFLA_STATS64) it reads, by its name in the kernel's
// Documentation/networking/statistics.rst.
type DeviceCounter struct {
	Metric Metric
	// Kernel is the field's name ("rx_missed_errors").
	Kernel string
	// Headline says whether it adds to drops/device; the breakdowns of
	// rx_errors and tx_errors do not (they are in them already).
	Headline bool
}

// DeviceCounters are the children of drops/device, in the order shown.
func DeviceCounters() []DeviceCounter {
	hw := &Threshold{Warn: 1, Crit: 100, Hold: 1}      // the device ran out of room: real loss
	errs := &Threshold{Warn: 0.01, Crit: 10, Hold: 2}  // broken frames, carrier: hardware or cabling
	dropped := &Threshold{Warn: 1, Crit: 100, Hold: 2} // software drops: some are routine
	m := func(id, title, desc string, thr *Threshold) Metric {
		return Metric{ID: DropsDevice + "/" + id, Title: title, Unit: "packets/s", Kind: Rate, Threshold: thr,
			Description: desc + " Per device children name the devices (`ip -s -s link show dev <device>`, and " +
				"`ethtool -S <device>` for the driver's own breakdown)."}
	}
	return []DeviceCounter{
		{m("rx_dropped", "Device: RX dropped", "Received packets the device or its driver dropped without an error in "+
			"them (rx_dropped): no buffer, a full receive queue (a veth's peer backlog, a tun/tap reader too slow), "+
			"or a packet the driver could not hand up. On older kernels also packets of protocols nothing handles.", dropped),
			"rx_dropped", true},
		{m("rx_missed", "Device: RX missed", "Packets the NIC could not take because the host had no free "+
			"descriptor in its receive ring (rx_missed_errors): the CPU serving the queue falls behind. Enlarge the "+
			"ring (`ethtool -G`), spread interrupts (RSS, irqbalance), check latency/softnet for time squeeze.", hw),
			"rx_missed_errors", true},
		{m("rx_errors", "Device: RX errors", "Bad packets received (rx_errors): the total of the length, CRC, frame and "+
			"other receive errors the driver reports, over/fifo included on most drivers. The sibling children "+
			"break it down.", errs),
			"rx_errors", true},
		{m("rx_over", "Device: RX overruns", "Packets dropped because the NIC's receive FIFO or ring overflowed "+
			"(rx_over_errors): bursts faster than the device drains to memory. Part of rx_errors.", hw),
			"rx_over_errors", false},
		{m("rx_fifo", "Device: RX FIFO errors", "Receive FIFO errors (rx_fifo_errors): hardware overflow events on "+
			"NICs, queue overflows on software devices. Part of rx_errors.", hw),
			"rx_fifo_errors", false},
		{m("rx_frame", "Device: RX frame errors", "Frames with alignment or framing errors (rx_frame_errors): a bad "+
			"cable, transceiver or duplex mismatch. Part of rx_errors.", errs),
			"rx_frame_errors", false},
		{m("rx_crc", "Device: RX CRC errors", "Frames with a bad checksum (rx_crc_errors): corruption on the wire, "+
			"usually a cable, optic or port. Part of rx_errors.", errs),
			"rx_crc_errors", false},
		{m("tx_dropped", "Device: TX dropped", "Packets the device or driver dropped on transmit (tx_dropped): no "+
			"room in its queue, no carrier, a veth whose peer is down, a tun/tap with no reader.", dropped),
			"tx_dropped", true},
		{m("tx_errors", "Device: TX errors", "Transmit failures (tx_errors): the total of aborted, FIFO, carrier, "+
			"heartbeat and window errors the driver reports. The sibling children break it down.", errs),
			"tx_errors", true},
		{m("tx_fifo", "Device: TX FIFO errors", "Transmit FIFO underruns (tx_fifo_errors): the device ran out of data "+
			"to send mid-frame. Part of tx_errors.", hw),
			"tx_fifo_errors", false},
		{m("tx_carrier", "Device: TX carrier errors", "Frames lost for loss of carrier (tx_carrier_errors): the link "+
			"went down or flaps (`ip -s link`: carrier changes). Part of tx_errors.", errs),
			"tx_carrier_errors", false},
	}
}

// DeviceTree is drops/device with its children; one grandchild per device is
// added as a device's counter moves.
func DeviceTree() []Metric {
	out := []Metric{{ID: DropsDevice, Title: "Device drops and errors", Unit: "packets/s", Kind: Rate,
		Description: "Packets the network devices of the watched namespace dropped or failed to send or receive, " +
			"from the kernel's own device statistics (rtnetlink IFLA_STATS64, as `ip -s -s link` shows them): " +
			"rx_dropped + rx_missed + rx_errors + tx_dropped + tx_errors. Below the stack, in drivers and hardware, " +
			"where no drop reason is recorded, so this is not part of the drops headline. The children split it by " +
			"counter, and under each the devices whose counter moved (at most " +
			fmt.Sprint(DeviceChildrenMax) + " per counter; the rest count in the counter only). Virtual devices count only some of them (a " +
			"veth has no FIFO, CRC or carrier errors)."}}
	for _, c := range DeviceCounters() {
		out = append(out, c.Metric)
	}
	return out
}

// DeviceChild is the child of one device under one counter of
// drops/device; id is the metric-safe device name.
func DeviceChild(parent Metric, id, name string) Metric {
	return Metric{ID: parent.ID + "/" + id, Title: parent.Title + " on " + name, Unit: parent.Unit, Kind: Rate,
		Threshold: parent.Threshold,
		Description: fmt.Sprintf("%s This child counts device %s only (`ip -s -s link show dev %s`).",
			parent.Description, name, name)}
}
