package catalog

import "fmt"

// The latency/qdisc subtree: qdisc sojourn per device, attached only while
// the latency branch is in trouble or an operator is looking.
const LatencyQdisc = "latency/qdisc"

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
