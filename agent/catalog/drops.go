package catalog

import (
	"fmt"
	"strings"
)

// The drops branch: what is the kernel throwing away? One child per drop
// reason seen, named from the running kernel's BTF (enum skb_drop_reason).
const (
	Drops             = "drops"
	DropsNotSpecified = "drops/not_specified"
	DropsOverflow     = "drops/overflow"
)

// DropsTree is the fixed part of the drops branch: the root. Children are
// added per reason as the kernel reports them.
func DropsTree() []Metric {
	return []Metric{{
		ID: Drops, Title: "Dropped packets", Unit: "packets/s", Kind: Rate,
		Description: "Packets the kernel dropped, with the kernel's own reason for each (one child per reason, " +
			"named from this kernel's BTF). The headline counts drops with a specific reason; drops/not_specified " +
			"(code that frees a packet without saying why, often not a real loss) is shown apart and left out " +
			"of it. Its state is the worst child's: open the red one, and under it the pods, containers or " +
			"namespaces that dropped most; the evidence names the packets (protocol, addresses, ports, device), " +
			"the kernel function that dropped them and who owns the namespace. Without BPF, a few /proc " +
			"counters stand in for the reasons. drops/conntrack (the connection tracking table) and drops/device " +
			"(the devices' own statistics) are counted apart, with or without BPF, and not in the headline: " +
			"conntrack's drops are netfilter_drop already, and the devices' lie below the stack.",
	}}
}

// dropReasonHelp enriches the reason names, which come from BTF at run time,
// with advice for the common ones. Others get a generic description.
var dropReasonHelp = map[string]string{
	"not_specified": "Packets freed by kernel code that gives no reason. Many are not losses at all (an unused " +
		"clone, a duplicate) and the count depends on kernel version and drivers, so it has no default threshold. " +
		"If it rises with a problem, the evidence's function names the code that freed them.",
	"no_socket": "Packets for a port with no socket: UDP to a closed port (UdpNoPorts), TCP segments answered " +
		"with a reset (see tcp_reset/sent/no_socket). Usual causes: a service down or restarting, clients " +
		"with stale addresses, port scans. Check the evidence's destination ports against `ss -lun` / `ss -ltn`.",
	"netfilter_drop": "Packets dropped by a netfilter rule (nftables or iptables). Intended when a firewall " +
		"blocks unwanted traffic; a rise, or drops of traffic that should pass, means a rule is wrong or a " +
		"policy changed. Check the evidence's addresses and ports against `nft list ruleset` (rule counters) " +
		"or `iptables -L -v -n`.",
	"socket_rcvbuff": "Packets dropped because the receiving socket's buffer was full (UdpRcvbufErrors for " +
		"UDP): the application reads too slowly, or SO_RCVBUF / net.core.rmem_default is too small for its " +
		"bursts. Find the port in the evidence, then the process (`ss -lunp`).",
	"socket_backlog": "Packets dropped because the socket's backlog was full while the application held the " +
		"socket (TcpExtTCPBacklogDrop for TCP). A slow or blocked reader on a fast flow.",
	"socket_filter": "Packets dropped by a socket filter (SO_ATTACH_FILTER, a BPF socket program): deliberate " +
		"filtering by an application, e.g. a packet capture with a filter.",
	"proto_mem": "Packets dropped because the protocol's memory limit was reached (tcp_mem / udp_mem): every " +
		"socket of that protocol is affected. See latency/memory_pressure and /proc/net/sockstat.",
	"tcp_listen_overflow": "Connection attempts dropped because a listener's accept queue was full: the " +
		"application does not accept() fast enough. See latency/listen_overflows.",
	"cpu_backlog": "Packets dropped because a CPU's input backlog was full (net.core.netdev_max_backlog): " +
		"the host receives faster than a CPU processes. See latency/softnet.",
	"qdisc_drop": "Packets dropped by a queueing discipline on transmit, usually because its queue was full: " +
		"this host sends more than the device or shaper lets through. Check `tc -s qdisc` for the device.",
	"qdisc_overlimit": "Packets dropped by a queueing discipline for exceeding its limit (a shaper or policer " +
		"rate). Check `tc -s qdisc` and `tc -s class` for the device.",
	"full_ring": "Packets dropped because a device's ring buffer was full. Check `ethtool -S` and `ethtool -g` " +
		"for the device in the evidence.",
	"nomem": "Packets dropped because the kernel could not allocate memory for them. Check the host's free " +
		"memory and fragmentation.",
	"otherhost": "Packets addressed to another host's MAC address (seen in promiscuous mode or on a shared " +
		"segment) and discarded. Usually harmless; a flood means switch flooding or a MAC table problem.",
	"ip_rpfilter": "Packets dropped by reverse-path filtering (rp_filter): their source would not be routed " +
		"back through the interface they came in on. Usual with asymmetric routing; check " +
		"net.ipv4.conf.*.rp_filter and the routes for the evidence's source addresses.",
	"ip_inaddrerrors": "IP packets with an invalid destination address for this host (IpInAddrErrors).",
	"ip_innoroutes":   "Received IP packets this host has no route for (IpExtInNoRoutes).",
	"ip_outnoroutes": "Packets this host could not send for lack of a route (IpOutNoRoutes). Check the routing " +
		"table for the evidence's destinations.",
	"neigh_failed": "Packets dropped because the neighbour (ARP / NDP) resolution of the next hop failed: the " +
		"next hop is down or unreachable on the link. Check `ip neigh` for FAILED entries.",
	"neigh_queuefull": "Packets dropped while waiting for neighbour resolution because the per-neighbour queue " +
		"was full. Check `ip neigh` and the next hop's reachability.",
	"tcp_csum": "TCP segments with a bad checksum: corruption on the path, or a device offload problem.",
	"udp_csum": "UDP datagrams with a bad checksum: corruption on the path, or a device offload problem.",
	"ip_csum":  "IP packets with a bad header checksum: corruption on the path.",
	"tcp_old_data": "TCP segments carrying only data already received: the peer retransmitted data that had " +
		"arrived (spurious retransmissions, often after a delay spike). Common in small amounts.",
	"tcp_ofomerge": "Out-of-order TCP segments dropped because the data was already queued. Common with " +
		"reordering or spurious retransmissions.",
	"tcp_ofo_drop":        "Out-of-order TCP segments dropped for lack of receive memory. See latency/socket_drops/ofo.",
	"tcp_ofo_queue_prune": "Out-of-order TCP data pruned to free memory. See latency/socket_drops.",
	"tcp_zerowindow":      "TCP segments dropped because the receive window was zero: the application is not reading.",
	"tcp_rfc7323_paws": "TCP segments that failed the PAWS timestamp check (RFC 7323): often NAT mixing " +
		"clients with different timestamp clocks, or very old duplicates.",
	"xdp":               "Packets dropped by an XDP program attached to a device: deliberate filtering or load balancing.",
	"tc_ingress":        "Packets dropped by a tc (traffic control) program or filter on ingress.",
	"tc_egress":         "Packets dropped by a tc (traffic control) program or filter on egress.",
	"bpf_cgroup_egress": "Packets dropped by a cgroup BPF egress program (e.g. a container network policy).",
	"unhandled_proto":   "Packets of a protocol nothing on this host handles (e.g. LLDP or STP frames). Usually harmless.",
	"pkt_too_small":     "Packets shorter than their headers say. Corruption, or malformed traffic.",
	"dup_frag":          "Duplicate IP fragments, discarded: retransmitted or duplicated fragments. Harmless in small numbers.",
	"frag_reasm_timeout": "IP fragments discarded because the rest of the datagram never arrived in time: loss " +
		"of fragments on the path, or fragments filtered somewhere.",
}

// dropThreshold gives each reason a default threshold (per second, over the
// hold count): reasons that mean this host is overloaded or misconfigured
// react at once to small rates; reasons common in healthy traffic only to
// large ones. not_specified has none.
func dropThreshold(reason string) *Threshold {
	switch reason {
	case "not_specified":
		return nil
	case "netfilter_drop":
		return &Threshold{Warn: 10, Crit: 100, Hold: 1}
	case "socket_rcvbuff", "socket_backlog", "proto_mem", "cpu_backlog", "full_ring", "nomem":
		return &Threshold{Warn: 1, Crit: 100, Hold: 1}
	case "tcp_listen_overflow":
		return &Threshold{Warn: 0.1, Crit: 10, Hold: 1}
	case "no_socket":
		return &Threshold{Warn: 50, Crit: 500, Hold: 2}
	}
	if HealthyTrafficDrop(reason) {
		return &Threshold{Warn: 100, Crit: 1000, Hold: 3}
	}
	return &Threshold{Warn: 10, Crit: 100, Hold: 2}
}

// HealthyTrafficDrop says a drop reason is common in healthy traffic: a
// duplicate or stale segment discarded (what a retransmission leaves), a
// socket's queues freed as it closes, a packet for another host. The drops
// tree raises them only at high rates, and the flow map counts them on an
// edge without raising its state.
func HealthyTrafficDrop(reason string) bool {
	switch reason {
	case "not_specified", "otherhost", "unhandled_proto", "pkt_too_small", "unicast_in_l2_multicast", "socket_close", "queue_purge",
		"tcp_old_data", "tcp_old_ack", "tcp_too_old_ack", "tcp_ofomerge", "tcp_old_sequence", "tcp_invalid_sequence",
		"tcp_reset", "tcp_close", "tcp_flags", "tcp_zerowindow", "tcp_overwindow", "tcp_rfc7323_paws",
		"tcp_rfc7323_paws_ack", "tcp_rfc7323_tw_paws", "tcp_abort_on_data", "neigh_dead", "dup_frag",
		"ipv6_ndisc_ns_otherhost", "qdisc_drop", "qdisc_overlimit", "qdisc_congested", "fq_band_limit",
		"fq_horizon_limit", "fq_flow_limit":
		return true
	}
	return false
}

// DropReason is the child metric for one kernel drop reason.
func DropReason(reason string) Metric {
	desc, ok := dropReasonHelp[reason]
	if !ok {
		desc = fmt.Sprintf("Packets the kernel dropped with reason SKB_DROP_REASON_%s (a name read from this "+
			"kernel's BTF). See include/net/dropreason-core.h in the kernel source for what triggers it; the "+
			"evidence names the packets and the kernel function that dropped them.", strings.ToUpper(reason))
	}
	return Metric{ID: Drops + "/" + reason, Title: "Dropped: " + reason, Unit: "packets/s", Kind: Rate,
		Description: desc, Threshold: dropThreshold(reason)}
}

// DropOverflow is the child for reasons beyond the BPF probe's table.
func DropOverflow() Metric {
	return Metric{ID: DropsOverflow, Title: "Dropped: other reasons", Unit: "packets/s", Kind: Rate,
		Description: "Drops whose reason code is beyond the probe's table of reasons: a subsystem's own reasons " +
			"(openvswitch, mac80211) or a kernel with far more reasons than expected. The evidence carries each " +
			"drop's exact reason code.",
		Threshold: &Threshold{Warn: 10, Crit: 100, Hold: 2}}
}

// DropProcCounter is one /proc fallback child of drops: counters summed
// (procnet names, "Udp.NoPorts"), and whether it is host-wide rather than
// per namespace.
type DropProcCounter struct {
	Metric   Metric
	Counters []string
	HostWide bool
}

// DropProcCounters are the drops children when BPF is unavailable, named
// like the kernel reasons they stand for where one does.
func DropProcCounters() []DropProcCounter {
	fallback := " Only /proc counters are available on this node (the node's Hello says why), so drops are not " +
		"split by the kernel's reasons and there is no evidence."
	m := func(id, title, desc string, thr *Threshold) Metric {
		return Metric{ID: Drops + "/" + id, Title: title, Unit: "packets/s", Kind: Rate, Description: desc + fallback, Threshold: thr}
	}
	return []DropProcCounter{
		{m("no_socket", "Dropped: no socket (UDP)", "UDP datagrams to a port with no socket (UdpNoPorts, Udp6NoPorts). "+
			"TCP segments to closed ports are not included here; see tcp_reset/sent.", dropThreshold("no_socket")),
			[]string{"Udp.NoPorts", "Udp6.NoPorts"}, false},
		{m("socket_rcvbuff", "Dropped: receive buffer full (UDP)", "UDP datagrams dropped because the socket's receive "+
			"buffer was full (UdpRcvbufErrors, Udp6RcvbufErrors): the application reads too slowly.", dropThreshold("socket_rcvbuff")),
			[]string{"Udp.RcvbufErrors", "Udp6.RcvbufErrors"}, false},
		{m("ip_indiscards", "Dropped: IP input discards", "IP packets discarded on input without an error in them "+
			"(IpInDiscards, Ip6InDiscards), e.g. for lack of memory.", &Threshold{Warn: 10, Crit: 100, Hold: 2}),
			[]string{"Ip.InDiscards", "Ip6.InDiscards"}, false},
		{m("listen_drops", "Dropped: listen drops", "Connection attempts dropped by a listening socket "+
			"(TcpExtListenDrops), mostly accept queue overflows. See latency/listen_drops.", dropThreshold("tcp_listen_overflow")),
			[]string{"TcpExt.ListenDrops"}, false},
		{m("cpu_backlog", "Dropped: CPU backlog full (host-wide)", "Packets dropped because a CPU's input backlog was full "+
			"(softnet_stat, every namespace of the host).", dropThreshold("cpu_backlog")),
			nil, true},
	}
}
