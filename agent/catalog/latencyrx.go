package catalog

// The latency/rx subtree: receive-stack latency, from a packet's kernel RX
// timestamp to its socket's receive queue and from there to the
// application's read, per protocol, always attached by default within the
// overhead budget.
const (
	LatencyRX         = "latency/rx"
	LatencyRXStack    = "latency/rx/stack"
	LatencyRXStackTCP = "latency/rx/stack/tcp"
	LatencyRXStackUDP = "latency/rx/stack/udp"
	LatencyRXRead     = "latency/rx/read"
	LatencyRXReadTCP  = "latency/rx/read/tcp"
	LatencyRXReadUDP  = "latency/rx/read/udp"
)

// Default thresholds. The stack is microseconds on a healthy host, so 5 ms
// at the p99 is already a CPU or a socket in trouble. How soon an
// application reads is its own business up to a point: a server blocked in
// recv reads within microseconds, a batch consumer later; a p99 of 200 ms
// is data that waits longer than any interactive client will.
func rxStackThreshold() *Threshold { return &Threshold{Warn: 5, Crit: 50, Hold: 2} }
func rxReadThreshold() *Threshold  { return &Threshold{Warn: 200, Crit: 1000, Hold: 3} }

const (
	rxStackHow = "BPF: the kernel's own software receive timestamp (skb->tstamp, which the agent turns on " +
		"host-wide by holding a socket with SOF_TIMESTAMPING_RX_SOFTWARE, as netstacklat does; the same stamp a " +
		"receiver's SO_TIMESTAMPING gets), to tracepoint tcp_probe for a TCP segment with data or sk_data_ready " +
		"for a UDP datagram. A TCP segment that crossed a veth or was forwarded is stamped at IP local delivery, " +
		"where the kernel replaces the sender's departure time."
	rxStackCauses = " Usual causes of a high value: softirq starvation (a CPU busy with interrupts or other " +
		"softirq work, a NAPI budget too small: latency/softnet/time_squeeze rises with it), the per-CPU backlog " +
		"filling under RPS or a flood (latency/softnet/dropped), and heavy netfilter rule sets. Next: " +
		"`mpstat -P ALL` for %soft per CPU, /proc/net/softnet_stat, IRQ affinity and RPS settings, " +
		"`nft list ruleset`."
	rxSocketBacklog = " For TCP also the socket's backlog: a segment arriving while the application holds its " +
		"socket waits until the application lets go, typically during a large recv or send on a fast flow " +
		"(TcpExtTCPBacklogDrop counts the ones that found it full)."
	// The sample is --latency.rx.sample, agent/probe/latencyrx.DefaultReadSample by default.
	rxReadHow = "BPF: from the moment the data reached the socket's receive queue to the application's read " +
		"(TCP: the first skb_copy_datagram_iovec of the skb, from recvmsg; UDP: the end of the recvmsg that " +
		"took the datagram, paired with it by its position in the socket's queue). A sample: the queue time is " +
		"kept for 1 in 16 TCP segments (by their timestamp) and for the datagrams of 1 in 16 UDP sockets (by " +
		"their addresses and ports, drawn anew at each agent start), the work beyond netstacklat's that would " +
		"otherwise cost every packet, so the counts are about a sixteenth " +
		"of the reads and the percentiles are the sample's. --latency.rx.sample sets the rate (1 in 16 by " +
		"default); while an operator has the node expanded every segment and every socket is timed (so the " +
		"one slow socket the sample left out shows), within --overhead.budget, and the counts rise with it."
	// The same sample, by packet.
	rxStackSample = " Sampled: 1 in 16 packets (--latency.rx.sample; every one while the node is expanded), by " +
		"their timestamp, are timed (for TCP the segments whose read is " +
		"timed), so the count is about a sixteenth of the packets and the percentiles are the sample's; filing " +
		"a time in this histogram costs more than netstacklat's coarser one, and a packet out of the sample " +
		"costs less."
	rxReadCauses = " This is the application's delay, not the network's: a reader that is busy, blocked on " +
		"something else (a lock, disk, a slow downstream), starved of CPU (its cgroup's quota, a loaded host), " +
		"or that reads in large batches. Data waiting here also fills the socket's receive buffer, which shrinks " +
		"the TCP window the peer sees and ends in drops for UDP (latency/socket_drops, drops). Next: `ss -tmpn` " +
		"or `ss -umpn` for sockets with a large Recv-Q and their process, then that process's CPU use and " +
		"run-queue delay (`/proc/<pid>/schedstat`)."
)

// rxAlwaysRemark says when latency/rx is measured.
const rxAlwaysRemark = " Measured always by default (--latency.rx.always): the programs cost about what " +
	"netstacklat's do, and run only where a packet reaches a socket or is read. Over the agent's overhead budget " +
	"they are detached for a rest (agent/triggered says so, and why); with --latency.rx.always=false only while " +
	"the latency branch is in trouble or an operator is looking."

// LatencyRXTree is the receive latency subtree.
func LatencyRXTree() []Metric {
	return []Metric{
		latencyHistogram(LatencyRX, "Receive latency in this host (p99)",
			"Time from a received packet's arrival in the network stack (the kernel's receive timestamp) until the "+
				"application read its data, for TCP and UDP on this host: the host's share of a receive's "+
				"latency, after the network delivered the packet. The children split it into the kernel's part "+
				"(stack: arrival to the socket's receive queue) and the application's (read: the queue to the "+
				"read). It counts data that carried a receive timestamp, in the read's sample (1 in 16 TCP segments, "+
				"the datagrams of 1 in 16 UDP sockets); a TCP segment merged into data already "+
				"queued gives that buffer its timestamp, so the buffer is timed once, from the newest data."+rxAlwaysRemark, nil),
		latencyHistogram(LatencyRXStack, "Receive stack: arrival → socket (p99)",
			"Time a received packet spent in the kernel's receive path, from the device handing it to the "+
				"stack to its socket's receive queue: IP and TCP/UDP processing, netfilter, and any wait in a "+
				"backlog. "+rxStackHow+rxStackSample+" Microseconds on a healthy host."+rxStackCauses+rxSocketBacklog+
				" The children split it by protocol."+rxAlwaysRemark, nil),
		latencyHistogram(LatencyRXStackTCP, "TCP receive stack (p99)",
			"Receive stack latency of TCP segments carrying data (pure ACKs are not timed): arrival to "+
				"tcp_rcv_established, which runs after the socket's backlog, so time a segment waited for an "+
				"application holding the socket counts here."+rxStackSample+rxStackCauses+rxSocketBacklog+rxAlwaysRemark,
			rxStackThreshold()),
		latencyHistogram(LatencyRXStackUDP, "UDP receive stack (p99)",
			"Receive stack latency of UDP datagrams: arrival to their socket's receive queue. UDP has no "+
				"socket backlog, so a high value here is the CPU's receive processing itself (softirq starvation, "+
				"the per-CPU backlog, netfilter)."+rxStackSample+rxStackCauses+rxAlwaysRemark,
			rxStackThreshold()),
		latencyHistogram(LatencyRXRead, "Receive queue → read (p99)",
			"Time received data waited in its socket's receive queue until the application read it. "+
				rxReadHow+rxReadCauses+" The children split it by protocol."+rxAlwaysRemark, nil),
		latencyHistogram(LatencyRXReadTCP, "TCP queue → read (p99)",
			"Time TCP data waited in its socket's receive queue for the application's read, timed per "+
				"socket buffer (segments merged into one are timed from the newest). A connection the "+
				"application keeps open without reading (an idle pool, a paused stream) adds its long waits "+
				"here, and so does data that arrived out of order and waited for a retransmission to fill the "+
				"gap before it (then latency/retransmits moves too). Data taken without a copy to user memory "+
				"(splice, kTLS, zero-copy receive) is not timed. A sample of 1 in 16 segments, by their timestamp."+
				rxReadCauses+rxAlwaysRemark,
			rxReadThreshold()),
		latencyHistogram(LatencyRXReadUDP, "UDP queue → read (p99)",
			"Time UDP datagrams waited in their socket's receive queue for the application's read. When more "+
				"than 32 datagrams wait in one socket, only the newest 32 are timed, so a badly lagging reader "+
				"shows here as a high value over fewer observations than datagrams. A sample: the datagrams of 1 in 16 "+
				"sockets (by their addresses and ports, drawn anew at each agent start; a SO_REUSEPORT group as one), "+
				"so a host with few UDP sockets may show none."+
				rxReadCauses+rxAlwaysRemark,
			rxReadThreshold()),
	}
}
