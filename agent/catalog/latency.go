package catalog

// The latency branch: is this host adding latency? Its always-on children
// are defined here; sampled TX timestamping, qdisc sojourn, per-flow and
// receive latency children live under latency/tx, latency/qdisc,
// latency/flows and latency/rx (latencytx.go, latencyqdisc.go,
// latencyflows.go, latencyrx.go).
const (
	Latency                = "latency"
	LatencyRetransmits     = "latency/retransmits"
	LatencyRTO             = "latency/rto"
	LatencyLostRetransmits = "latency/lost_retransmits"
	LatencyListenOverflows = "latency/listen_overflows"
	LatencyListenDrops     = "latency/listen_drops"
	LatencySocketDrops     = "latency/socket_drops"
	LatencySocketRcvQ      = "latency/socket_drops/rcvq"
	LatencySocketBacklog   = "latency/socket_drops/backlog"
	LatencySocketPruned    = "latency/socket_drops/pruned"
	LatencySocketOFO       = "latency/socket_drops/ofo"
	LatencyMemoryPressure  = "latency/memory_pressure"
	LatencySoftnet         = "latency/softnet"
	LatencySoftnetDropped  = "latency/softnet/dropped"
	LatencySoftnetSqueeze  = "latency/softnet/time_squeeze"
)

// LatencyProcCounters says which /proc counter feeds which always-on child
// ("TcpExt.ListenOverflows" as procnet names it). Retransmits and RTOs come
// from BPF where it is available; softnet from softnet_stat.
var LatencyProcCounters = map[string]string{
	LatencyRetransmits:     "Tcp.RetransSegs",
	LatencyRTO:             "TcpExt.TCPTimeouts",
	LatencyLostRetransmits: "TcpExt.TCPLostRetransmit",
	LatencyListenOverflows: "TcpExt.ListenOverflows",
	LatencyListenDrops:     "TcpExt.ListenDrops",
	LatencySocketRcvQ:      "TcpExt.TCPRcvQDrop",
	LatencySocketBacklog:   "TcpExt.TCPBacklogDrop",
	LatencySocketPruned:    "TcpExt.RcvPruned",
	LatencySocketOFO:       "TcpExt.TCPOFODrop",
	LatencyMemoryPressure:  "TcpExt.TCPMemoryPressures",
}

// LatencyTree is the latency root and its always-on children.
func LatencyTree() []Metric {
	return []Metric{
		{
			ID: Latency, Title: "Latency added by this host", Unit: "segments/s", Kind: Rate,
			Description: "Is this host adding latency? Its state is the worst of its children: open the red child. " +
				"The headline is TCP segments retransmitted per second, the commonest way a host adds latency " +
				"(every retransmission costs the application at least a round trip, a timeout 200 ms or more). " +
				"The children show the other ways: retransmission timeouts, lost retransmissions, connections " +
				"refused at a full accept queue, data thrown away for lack of socket memory, packets dropped or " +
				"delayed before the stack ever saw them (softnet), congestion the network signalled with ECN marks " +
				"instead of losses (ecn), and, where sampled, where time goes on the " +
				"transmit path (tx), in queueing disciplines (qdisc) and on the receive path to the application (rx).",
		},
		{
			ID: LatencyRetransmits, Title: "Retransmitted segments", Unit: "segments/s", Kind: Rate,
			Description: "TCP segments this host sent again (data, SYN, SYN-ACK, FIN and tail loss probes), exactly " +
				"as the kernel's TcpRetransSegs counts them; with BPF, in every namespace the agent watches. " +
				"Each one means the first copy was lost or late: somewhere on the path (look at the peer's drops, the " +
				"network) or on this host (drops/*, latency/softnet, a full qdisc). A steady rate on a busy host is " +
				"normal; compare with the traffic volume, and with the rto child: timeouts are the costly kind. " +
				"Next: `ss -ti` shows retransmissions per connection, or latency/flows when it is triggered.",
			Threshold: &Threshold{Warn: 100, Crit: 1000, Hold: 2},
		},
		{
			ID: LatencyRTO, Title: "Retransmission timeouts", Unit: "timeouts/s", Kind: Rate,
			Description: "Retransmission timeouts (RTOs): a connection heard nothing back for a whole timeout (200 ms " +
				"at least, doubling each time) and fell back to resending from the first unacknowledged segment. " +
				"Each one stalls the application for the timeout. Usual causes: heavy or bursty loss, a lost " +
				"retransmission, a peer or path that went silent, tail loss on short flows. With BPF this counts " +
				"every socket's tcp_sock.total_rto growth and equals TcpExtTCPTimeouts except for SYN-ACK timeouts of " +
				"half-open connections (counted in retransmits) and a connection's final, fatal timeout; without " +
				"BPF it is TcpExtTCPTimeouts. Next: the retransmits and lost_retransmits children, then the peers.",
			Threshold: &Threshold{Warn: 1, Crit: 10, Hold: 2},
		},
		{
			ID: LatencyLostRetransmits, Title: "Lost retransmissions", Unit: "segments/s", Kind: Rate,
			Description: "Retransmitted segments that were lost again (TcpExtTCPLostRetransmit, detected by RACK/SACK). " +
				"A lost retransmission usually ends in a timeout, so this predicts rto. Usual cause: loss that is " +
				"heavy or persistent rather than random, a congested or failing link, a policer. Next: drops on " +
				"both ends of the affected paths.",
			Threshold: &Threshold{Warn: 1, Crit: 10, Hold: 2},
		},
		{
			ID: LatencyListenOverflows, Title: "Listen queue overflows", Unit: "connections/s", Kind: Rate,
			Description: "Connections dropped because a listening socket's accept queue was full " +
				"(TcpExtListenOverflows): the application did not call accept() fast enough. The client sees its " +
				"SYN or handshake ACK ignored and retries after a second or more. Usual causes: an overloaded or " +
				"stalled server process, a backlog too small for bursts (listen() backlog, net.core.somaxconn). " +
				"Next: `ss -ltn` (Recv-Q near Send-Q is a full queue) to find the port, then the process behind it.",
			Threshold: &Threshold{Warn: 0.1, Crit: 10, Hold: 1},
		},
		{
			ID: LatencyListenDrops, Title: "Listen drops", Unit: "connections/s", Kind: Rate,
			Description: "Connection attempts a listening socket dropped for any reason (TcpExtListenDrops): accept " +
				"queue overflows (see listen_overflows) plus SYNs dropped for lack of memory, a full SYN queue " +
				"without syncookies, or a failed route lookup. Each costs the client a retransmitted SYN, a second " +
				"or more. When it is above listen_overflows, look at TcpExtTCPReqQFullDrop and syncookie settings.",
			Threshold: &Threshold{Warn: 0.1, Crit: 10, Hold: 1},
		},
		{
			ID: LatencySocketDrops, Title: "Socket memory drops", Unit: "segments/s", Kind: Rate,
			Description: "TCP data this host received and then threw away because a socket had no memory for it; the " +
				"peer must send it again. The sum of the children, which say where: receive queue, backlog, " +
				"pruning, out-of-order queue. Usual causes: an application that reads too slowly, receive buffers " +
				"too small for the bandwidth-delay product, TCP memory pressure (memory_pressure).",
		},
		{
			ID: LatencySocketRcvQ, Title: "Receive queue full", Unit: "segments/s", Kind: Rate,
			Description: "Segments dropped because the socket's receive buffer was full or could not grow " +
				"(TcpExtTCPRcvQDrop). The application is not reading fast enough, or tcp_rmem / SO_RCVBUF is too " +
				"small, or TCP is under memory pressure. Next: `ss -tm` for sockets with a full Recv-Q.",
			Threshold: &Threshold{Warn: 1, Crit: 100, Hold: 2},
		},
		{
			ID: LatencySocketBacklog, Title: "Socket backlog full", Unit: "segments/s", Kind: Rate,
			Description: "Segments dropped because they arrived while the application held the socket and the socket's " +
				"backlog queue was full (TcpExtTCPBacklogDrop). Usually a process that holds its socket for long " +
				"(a large send or receive call) on a fast flow, or a receive buffer far too small.",
			Threshold: &Threshold{Warn: 1, Crit: 100, Hold: 2},
		},
		{
			ID: LatencySocketPruned, Title: "Receive queue pruned", Unit: "packets/s", Kind: Rate,
			Description: "Packets dropped from a socket's receive queue after collapsing it failed to free enough " +
				"memory (TcpExtRcvPruned): data already queued was thrown away, the worst kind of socket memory " +
				"drop. Raise receive buffers (tcp_rmem) or find the application that is not reading.",
			Threshold: &Threshold{Warn: 1, Crit: 100, Hold: 2},
		},
		{
			ID: LatencySocketOFO, Title: "Out-of-order queue drops", Unit: "segments/s", Kind: Rate,
			Description: "Out-of-order segments dropped because the socket had no memory to hold them until the gap " +
				"was filled (TcpExtTCPOFODrop). Happens with loss on fast, long paths and small receive buffers; " +
				"the peer must resend them.",
			Threshold: &Threshold{Warn: 1, Crit: 100, Hold: 2},
		},
		{
			ID: LatencyMemoryPressure, Title: "TCP memory pressure", Unit: "events/s", Kind: Rate,
			Description: "Times TCP entered memory pressure (TcpExtTCPMemoryPressures): all TCP sockets of this host " +
				"together passed net.ipv4.tcp_mem's pressure level, so the kernel shrinks buffers and prunes queues " +
				"for every connection. Check `cat /proc/net/sockstat` (TCP mem, in pages) against tcp_mem, and " +
				"look for sockets holding large unread queues or many orphans.",
			Threshold: &Threshold{Warn: 0.1, Crit: 1, Hold: 1},
		},
		{
			ID: LatencySoftnet, Title: "Softnet backlog", Unit: "events/s", Kind: Rate,
			Description: "Trouble in the per-CPU receive backlog, before packets reach the protocol stack, from " +
				"/proc/net/softnet_stat (host-wide, every namespace): drops plus time squeezes. See the children.",
		},
		{
			ID: LatencySoftnetDropped, Title: "Softnet drops", Unit: "packets/s", Kind: Rate,
			Description: "Packets dropped because a CPU's input backlog was full (net.core.netdev_max_backlog) or by " +
				"the flow limit: the host received faster than its CPUs processed. Host-wide. Usual causes: " +
				"interrupts or RPS steering concentrating load on one CPU, a CPU busy elsewhere, a backlog too " +
				"small for bursts. Next: the per-CPU columns of /proc/net/softnet_stat, IRQ affinity, RPS settings.",
			Threshold: &Threshold{Warn: 1, Crit: 100, Hold: 2},
		},
		{
			ID: LatencySoftnetSqueeze, Title: "Softnet time squeeze", Unit: "events/s", Kind: Rate,
			Description: "Times a CPU's receive processing (NAPI) stopped with packets still waiting because it ran " +
				"out of budget or time (net.core.netdev_budget, netdev_budget_usecs). Packets wait for the next " +
				"round: added latency, drops if it persists. Common on busy hosts, so the threshold is relative " +
				"to this host's own median. Next: softnet drops, per-CPU load, the budget sysctls.",
			// Below 10 squeezes/s nothing is worth a look, whatever the baseline.
			Threshold: &Threshold{Warn: 5, Crit: 20, Hold: 3, Baseline: 30, Floor: 10},
		},
	}
}

// Shared by the latency subtrees: the queueing thresholds, the histogram
// shape, and the remark of the triggered ones.
const (
	latencyQueueWarnMs         = 20
	latencyQueueCritMs         = 100
	latencyTriggeredOnlyRemark = " Measured only while the latency branch is in trouble or an operator is looking " +
		"(per-packet programs cost CPU on every packet), for a bounded time and within the agent's overhead budget; " +
		"agent/triggered says whether it is attached."
)

// queueThreshold is for host queueing delay: a healthy queue on a host is
// microseconds; tens of milliseconds is bufferbloat someone will feel.
func queueThreshold() *Threshold {
	return &Threshold{Warn: latencyQueueWarnMs, Crit: latencyQueueCritMs, Hold: 2}
}

func latencyHistogram(id, title, desc string, thr *Threshold) Metric {
	return Metric{ID: id, Title: title, Unit: "ms", Kind: Histogram, Quantile: 0.99, Scale: 1e6, Description: desc, Threshold: thr}
}
