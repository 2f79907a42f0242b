package catalog

import (
	"fmt"

	"github.com/nbs-project/nbs/internal/schema"
)

// The sampled and triggered parts of the latency branch: where a write's
// time goes on the transmit path (always on, for a sample of connections),
// qdisc sojourn per device and per-flow detail (attached only while the
// latency branch is in trouble or an operator is looking).
const (
	LatencyTX                  = "latency/tx"
	LatencyTXSendmsgToQdisc    = "latency/tx/sendmsg_to_qdisc"
	LatencyTXQdiscToDriver     = "latency/tx/qdisc_to_driver"
	LatencyTXDriverToAck       = "latency/tx/driver_to_ack"
	LatencyQdisc               = "latency/qdisc"
	LatencyFlows               = "latency/flows"
	LatencyFlowsSRTT           = "latency/flows/srtt"
	LatencyFlowsSampled        = "latency/flows/sampled"
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

// LatencyQdiscTree is the qdisc sojourn parent; one child per device is
// added as devices carry traffic.
func LatencyQdiscTree() []Metric {
	return []Metric{latencyHistogram(LatencyQdisc, "Qdisc sojourn, all devices (p99)",
		"Time packets spent between dev_queue_xmit and the driver on this host's devices (BPF, tracepoints "+
			"net_dev_queue and net_dev_start_xmit, every packet while attached): the queueing discipline's queue "+
			"and the device's TX lock. Microseconds when healthy; tens of milliseconds and up is bufferbloat. The "+
			"children name the devices."+latencyTriggeredOnlyRemark, queueThreshold())}
}

// QdiscDevice is the child of one device. id is the metric-safe name, name
// the kernel's; netns is set for a device outside the agent's namespace.
func QdiscDevice(id, name string, netns uint32) Metric {
	where := ""
	if netns != 0 {
		where = fmt.Sprintf(" in network namespace %d", netns)
	}
	return latencyHistogram(LatencyQdisc+"/"+id, "Qdisc sojourn on "+name+" (p99)",
		fmt.Sprintf("Time packets leaving by device %s%s waited between dev_queue_xmit and its driver: its "+
			"qdisc's queue (`tc -s qdisc show dev %s`: backlog, drops) and its TX lock. Usual causes of a high "+
			"value: a rate limit (tbf, htb, a policer upstream) with a deep queue, the link saturated by bulk "+
			"traffic, a device pausing (flow control). Look at what fills it: latency/flows, `ss -ti`, the "+
			"device's byte counters.", name, where, name)+latencyTriggeredOnlyRemark, queueThreshold())
}

// LatencyFlowsTree is the per-flow detail subtree. Its evidence names the
// flows with the most retransmits, with their smoothed RTT.
func LatencyFlowsTree() []Metric {
	return []Metric{
		{ID: LatencyFlows, Title: "Flows retransmitting", Unit: "flows", Kind: Gauge,
			Description: "TCP flows that retransmitted during the interval, among those sampled (BPF, tracepoint " +
				"tcp_probe, at most one sample per flow every 100 ms and a per-CPU cap). The evidence lists the " +
				"flows with the most retransmits: 5-tuple, retransmits in the interval and in total, smoothed RTT, " +
				"RTT variation, congestion window. Many flows to many peers point at this host or its uplink; a " +
				"few flows to one peer point at that peer or its path." + latencyTriggeredOnlyRemark},
		latencyHistogram(LatencyFlowsSRTT, "Smoothed RTT of sampled flows (p99)",
			"The kernel's smoothed round-trip time (srtt, as `ss -ti` shows it) of each TCP flow sampled in the "+
				"interval, one value per flow. It includes the network, the peer and queues on this host; it has "+
				"no meaning by itself across paths, so no threshold. Sampled as segments arrive, so it lags the "+
				"socket by at most one ACK."+latencyTriggeredOnlyRemark, nil),
		{ID: LatencyFlowsSampled, Title: "Flows sampled", Unit: "flows", Kind: Gauge,
			Description: "TCP flows the per-flow sampler saw during the interval (those that received segments)." +
				latencyTriggeredOnlyRemark},
	}
}

// MetricSegment makes a kernel name (a device, a program's attach point)
// usable as one segment of a metric id (schema.Segment).
func MetricSegment(name string) string { return schema.Segment(name) }
