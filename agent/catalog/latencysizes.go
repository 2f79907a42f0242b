package catalog

import "fmt"

// The latency/sizes subtree: packet sizes per device as the stack sends
// them, as the driver gets them, and as the stack receives them (netsize's
// three views), attached only while the latency branch is in trouble or an
// operator is looking.
const (
	LatencySizes = "latency/sizes"
	// The children of a device's child.
	SizesXmit     = "xmit"
	SizesReceived = "received"
)

// sizesHistogram is a histogram of sizes: recorded in bytes in the shared
// log-linear layout (bucket edges 1/16 of a power of two apart: 64 bytes
// around the MTU, and one edge at 1,536, just above a 1,514-byte Ethernet
// frame, so "above the MTU" is a bucket boundary), its headline the p99:
// with segmentation offloads working, bulk traffic's p99 is tens of
// kilobytes; without, it is at most the MTU's frame.
func sizesHistogram(id, title, desc string) Metric {
	return Metric{ID: id, Title: title, Unit: "bytes", Kind: Histogram, Quantile: 0.99, Scale: 1, Description: desc}
}

const sizesHow = " Sizes are the kernel's skb->len: the Ethernet header included on the way out (a full " +
	"1,500-byte MTU frame is 1,514), not on the way in (1,500)."

// sizesTrigger says when latency/sizes is measured, and why then.
const sizesTrigger = " Measured only while the latency branch is in trouble or an operator is looking: " +
	"segmentation and receive offloads that fail cost CPU per byte (ten to forty times the packets through the " +
	"stack), which shows first as latency (softirq time, queues, retransmits under load); these " +
	"programs run on every packet, so not always. agent/triggered says whether they are attached."

// LatencySizesTree is the packet sizes parent; one child per device (with
// two children of its own) is added as devices carry traffic.
func LatencySizesTree() []Metric {
	return []Metric{sizesHistogram(LatencySizes, "Packet sizes sent by the stack, all devices (p99)",
		"Sizes of the packets this host's stack handed its network devices (BPF, tracepoint net_dev_queue, every "+
			"packet while attached), before the qdisc and before any software segmentation: what TCP and UDP "+
			"passed down. TCP builds packets of many segments (up to 64 KiB, more with BIG TCP) whenever it can, "+
			"so under bulk traffic the p99 is tens of kilobytes; MTU-sized (1,514) only if TCP was refused GSO or "+
			"nothing bulky was sent. The children split it by device, and for each device show what its driver was "+
			"handed (xmit: still large with TSO or a veth, cut to the MTU by software GSO) and what the stack "+
			"received from it (received: large when GRO merged segments). The shape of the netsize tool of the BPF "+
			"Performance Tools book. No threshold: sizes say why, not that something is wrong."+sizesHow+sizesTrigger)}
}

// SizesDevice is the child of one device, and its two children. id is the
// metric-safe name, name the kernel's; netns is set for a device outside
// the agent's namespace.
func SizesDevice(id, name string, netns uint32) []Metric {
	where := ""
	if netns != 0 {
		where = fmt.Sprintf(" in network namespace %d", netns)
	}
	base := LatencySizes + "/" + id
	return []Metric{
		sizesHistogram(base, "Packet sizes sent to "+name+" (p99)",
			fmt.Sprintf("Sizes of the packets the stack handed device %s%s (net_dev_queue), before segmentation: "+
				"compare with its xmit child. Large here and large at xmit: the device (or veth, which passes them on "+
				"whole) takes TSO packets and the NIC cuts them. Large here and at most 1,514 at xmit: GSO cut them "+
				"in software (tso off, or a device without TSO: a tunnel, a bond, a driver lacking it), at a CPU cost "+
				"per segment. At most 1,514 here under bulk traffic: TCP was given no GSO (`ethtool -k %s`: "+
				"generic-segmentation-offload, tcp-segmentation-offload).", name, where, name)+sizesHow),
		sizesHistogram(base+"/"+SizesXmit, "Packet sizes to "+name+"'s driver (p99)",
			fmt.Sprintf("Sizes of the packets device %s's driver was handed (net_dev_xmit, accepted), after the qdisc "+
				"and after software GSO: what the NIC gets. Packets and bytes are what `ip -s link show %s` counts "+
				"(TX). Above 1,514 only with TSO (or a veth); at most 1,514 means segmentation happened in software "+
				"before it.", name, name)+sizesHow),
		sizesHistogram(base+"/"+SizesReceived, "Packet sizes received from "+name+" (p99)",
			fmt.Sprintf("Sizes of the packets the stack took in from device %s (netif_receive_skb), after GRO: large "+
				"when GRO (or the NIC's LRO, or a veth peer's TSO packets) merged segments, at most the MTU's 1,500 "+
				"when nothing did, which costs the stack a pass per segment. Packets are what `ip -s link show %s` "+
				"counts (RX); bytes less its 14-byte Ethernet headers. Check `ethtool -k %s` "+
				"(generic-receive-offload) and the NIC's own counters.", name, name, name)+sizesHow),
	}
}
