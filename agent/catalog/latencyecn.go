package catalog

import "fmt"

// latency/ecn: congestion-experienced (CE) marks, the network's own signal
// of queueing, from the watched namespace's /proc counters: the codepoints
// of the packets received (IpExt and Ip6 In*Pkts), the segments TCP learnt
// were marked (TcpExtTCPDeliveredCE), and whether TCP asks for ECN at all
// (net.ipv4.tcp_ecn).
const (
	LatencyECN            = "latency/ecn"
	LatencyECNShare       = "latency/ecn/ce_share"
	LatencyECNDeliveredCE = "latency/ecn/delivered_ce"
	LatencyECNMode        = "latency/ecn/tcp_ecn"
)

// ECNCECounters feed latency/ecn, ECNCapableCounters only its ce_share:
// counters of /proc/net/netstat (IPv4) and /proc/net/snmp6 (IPv6) as
// procnet names them, IPv4 and IPv6 summed. The ECT(0)/ECT(1) counts are
// not children of their own: they move with every ECN-capable packet, and
// a counter child that moves is streamed (so counts add up exactly), which
// would make every healthy node's report carry them. The share says what
// an operator needs of them.
var (
	ECNCECounters      = [2]string{"IpExt.InCEPkts", "Ip6.InCEPkts"}
	ECNCapableCounters = [][2]string{{"IpExt.InECT0Pkts", "Ip6.InECT0Pkts"}, {"IpExt.InECT1Pkts", "Ip6.InECT1Pkts"}}
)

// ECNDeliveredCECounter feeds latency/ecn/delivered_ce (Linux 4.20 on).
const ECNDeliveredCECounter = "TcpExt.TCPDeliveredCE"

// ECNTree is latency/ecn and its children, defined while the namespace's
// kernel counts ECN codepoints (every kernel since 3.x does).
func ECNTree() []Metric {
	return []Metric{
		{ID: LatencyECN, Title: "Congestion marks received (ECN CE)", Unit: "packets/s", Kind: Rate,
			Description: "Packets this host received marked Congestion Experienced (CE): a router, switch or queue " +
				"on the way (an AQM such as fq_codel, RED, a DCTCP/L4S switch) was queueing them and, instead of " +
				"dropping, set the two ECN bits of the IP header. Each mark is the network saying \"slow down\": the " +
				"receiving TCP echoes it to the sender, which shrinks its window as for a loss, but nothing is lost " +
				"or retransmitted. Counted at IP input of the watched namespace (IpExtInCEPkts + Ip6InCEPkts), " +
				"forwarded packets included, TCP and UDP (QUIC) alike, one per wire packet even when GRO merged them. " +
				"Marks need both ends to use ECN (tcp_ecn and the share's ECN-capable packets say whether they do) and a marking queue " +
				"on the path; without them congestion shows as loss instead (latency/retransmits, drops). The ce_share " +
				"child says how much of the ECN-capable traffic was marked; the devices child, measured while this branch is in trouble, " +
				"on which devices and from which peers the marks came. Next: `nstat -az | grep -i ecn` on both " +
				"ends, `tc -s qdisc` on the hops you control (marked counts of fq_codel, red), the switches' ECN counters."},
		{ID: LatencyECNShare, Title: "Share of ECN packets marked CE", Unit: "%", Kind: Gauge,
			Description: "Of the ECN-capable packets received in the interval (CE + ECT(0) + ECT(1)), the share marked " +
				"CE, in percent. No value (not 0) while no ECN-capable packet arrives: there is nothing to mark. " +
				"The default threshold is for classic ECN (RFC 3168, ECT(0), what Linux's tcp_ecn sends): an AQM marks " +
				"where it would otherwise drop, so the share reads like a loss rate. By Mathis' formula a Reno-like " +
				"flow's window averages 1.22/sqrt(p) segments: about 12 at 1%, 5 at 5%, far below what a fast path " +
				"carries. A path marking over 1% of packets for minutes is congested; over 5% is a queue standing full, " +
				"with the delay it adds (an AQM marks only once its target delay is exceeded). On DCTCP or L4S " +
				"networks (ECT(1)) shallow, frequent marking is the design and shares of tens of " +
				"percent are normal: raise the threshold for those nodes. Next: which peers send the marked " +
				"traffic (`ss -tin` shows per connection ecn, ecnseen and delivered_ce), the queues on their path.",
			Threshold: &Threshold{Warn: 1, Crit: 5, Hold: 3}},
		{ID: LatencyECNDeliveredCE, Title: "Segments TCP learnt were marked", Unit: "segments/s", Kind: Rate,
			Description: "TCP's response to marks, on the sending side: segments this host sent whose delivery the " +
				"peer acknowledged with an ECN echo (TcpExtTCPDeliveredCE). Each echo makes the sender reduce its " +
				"congestion window once per round trip (CWR), as for a loss but without retransmitting. With classic " +
				"ECN the echo repeats on every ACK until the sender's CWR reaches the peer, so this counts every segment " +
				"delivered in that round trip, more than the marks themselves; with Accurate ECN it counts marked " +
				"segments exactly. Per connection: delivered_ce in `ss -tin`. Rising here while the latency/ecn root stays quiet means the marks are on the " +
				"way out, towards the peers: congestion on their side or in the network, not in what this host receives."},
		{ID: LatencyECNMode, Title: "TCP ECN mode (net.ipv4.tcp_ecn)", Unit: "mode", Kind: Gauge,
			Description: "The watched namespace's net.ipv4.tcp_ecn: 0 never use ECN; 1 ask for it on outgoing " +
				"connections and accept it on incoming ones; 2 (the Linux default) accept it when a peer asks, " +
				"never ask; higher values are newer kernels' Accurate ECN modes. A host that only receives " +
				"(mode 2) gets marks only from peers that ask; a host that sends bulk data and should react to " +
				"marks rather than losses needs 1 (and its peers 1 or 2). ECN is negotiated per connection: " +
				"`ss -tin` shows ecn on the connections that use it, ecnseen where ECN codepoints arrived. Shown for the record, no threshold."},
	}
}

// LatencyECNDevices is the triggered subtree of latency/ecn: CE marks
// received per device and per peer, from a BPF program on the receive path
// (agent/source/latencyecn), attached only while latency/ecn is in trouble
// or an operator is looking.
const LatencyECNDevices = "latency/ecn/devices"

// ECNPeerOther is the child of a device's peers beyond its named ones.
const ECNPeerOther = "other"

const ecnTriggeredRemark = " Measured only while latency/ecn is in trouble (its share of marked packets above its " +
	"threshold) or an operator is looking: the program reads the IP header of every received packet. " +
	"agent/triggered says whether it is attached."

// ECNDevicesTree is the per-device parent; devices and their peers are
// added as marks arrive.
func ECNDevicesTree() []Metric {
	return []Metric{{ID: LatencyECNDevices, Title: "Congestion marks received, by device", Unit: "packets/s", Kind: Rate,
		Description: "Packets marked Congestion Experienced (CE) as this host's devices received them (BPF, tracepoint " +
			"netif_receive_skb: the IP header's two ECN bits of every IPv4 and IPv6 packet, one count per packet as the " +
			"device delivered it, so a GRO-merged packet counts once where the latency/ecn root counts each segment). " +
			"The children name the devices the marks came in on, and under each the peers (source addresses) that " +
			"sent the marked packets: the path between that peer and this host has a queue that marks." + ecnTriggeredRemark}}
}

// ECNDevice is the child of one device. id is the metric-safe name, name
// the kernel's; netns is set for a device outside the agent's namespace.
func ECNDevice(id, name string, netns uint32) Metric {
	where := ""
	if netns != 0 {
		where = fmt.Sprintf(" in network namespace %d", netns)
	}
	return Metric{ID: LatencyECNDevices + "/" + id, Title: "Congestion marks received on " + name, Unit: "packets/s", Kind: Rate,
		Description: fmt.Sprintf("CE-marked packets received by device %s%s. Its children name the peers that sent them "+
			"(the %d that marked first, the rest together as other). Marks on one device only point at the path behind it "+
			"(its uplink, a switch port, a tunnel); marks from one peer only, at that peer's path or its own queue.",
			name, where, ECNMaxPeers)}
}

// ECNMaxPeers bounds the named peers of a device.
const ECNMaxPeers = 8

// ECNPeer is the child of one peer under device devID.
func ECNPeer(devID, peerID, addr string) Metric {
	return Metric{ID: LatencyECNDevices + "/" + devID + "/" + peerID, Title: "Congestion marks from " + addr, Unit: "packets/s", Kind: Rate,
		Description: "CE-marked packets received from " + addr + " on this device: a queue on the path from that peer " +
			"(or the peer's own, an AQM on its egress) marks its traffic to this host. Next: `ss -tin dst " + addr +
			"` (ecnseen, delivered_ce on the peer), the queues on that path, and whether other peers are marked too."}
}

// ECNPeerOtherChild is the child of a device's peers beyond its named ones.
func ECNPeerOtherChild(devID string) Metric {
	return Metric{ID: LatencyECNDevices + "/" + devID + "/" + ECNPeerOther, Title: "Congestion marks from other peers", Unit: "packets/s", Kind: Rate,
		Description: fmt.Sprintf("CE-marked packets received on this device from peers beyond the %d named beside this child.", ECNMaxPeers)}
}
