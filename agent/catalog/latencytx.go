package catalog

// The latency/tx subtree: where a write's time goes on the transmit path,
// always on for a sample of connections.
const (
	LatencyTX               = "latency/tx"
	LatencyTXSendmsgToQdisc = "latency/tx/sendmsg_to_qdisc"
	LatencyTXQdiscToDriver  = "latency/tx/qdisc_to_driver"
	LatencyTXDriverToAck    = "latency/tx/driver_to_ack"
)

// LatencyTXTree is the sampled TX timestamping subtree.
func LatencyTXTree() []Metric {
	return []Metric{
		latencyHistogram(LatencyTX, "TX latency in this host (p99)",
			"Time from an application's write (the start of tcp_sendmsg) until the network driver is handed "+
				"the data, for a sample of TCP connections (BPF TX timestamping, 1 in --tx-timestamping.sample "+
				"connections opened since the agent started, in the agent's cgroup). This is the host's share of "+
				"a send's latency; the children split it and add the time to the peer's ACK. It includes time the "+
				"data waits for the congestion or receive window, so a bulk transfer to a slow peer is slow here "+
				"without anything being wrong with the host: look at qdisc_to_driver for queueing in the host.", nil),
		latencyHistogram(LatencyTXSendmsgToQdisc, "sendmsg → qdisc (p99)",
			"From the start of the write to dev_queue_xmit (the SCHED timestamp): the TCP stack, and the "+
				"time the data waited in the socket's write queue for the congestion window, the peer's receive "+
				"window, pacing or Nagle. Microseconds for interactive traffic; long for bulk transfers, by design. "+
				"High for small writes: a full send buffer, small windows (a slow or distant peer), or the "+
				"application writing faster than the path carries.", nil),
		latencyHistogram(LatencyTXQdiscToDriver, "qdisc → driver (p99)",
			"From dev_queue_xmit to the driver (SCHED to SND_SW timestamps): the time packets waited in the "+
				"device's queueing discipline and for the device. A few microseconds on a healthy host; "+
				"milliseconds and up is bufferbloat in a qdisc (a shaper such as tbf or htb with a deep queue, a "+
				"saturated link) or a device that cannot send (flow control, a stuck TX queue). Next: "+
				"latency/qdisc names the device (it is attached when this turns red); `tc -s qdisc` shows backlog "+
				"and drops.", queueThreshold()),
		latencyHistogram(LatencyTXDriverToAck, "driver → ACK (p99)",
			"From the driver to the peer's acknowledgement of the data (SND_SW to ACK timestamps): the "+
				"network round trip plus the peer's delay in acknowledging (delayed ACKs, a busy receiver). "+
				"It has no meaning by itself across paths, so no default threshold: compare with the ping branch "+
				"for the same peers; a rise here with a flat ping points at the peers or their load.", nil),
	}
}
