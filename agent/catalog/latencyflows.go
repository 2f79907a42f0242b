package catalog

// The latency/flows subtree: per-flow detail, attached only while the
// latency branch is in trouble or an operator is looking.
const (
	LatencyFlows        = "latency/flows"
	LatencyFlowsSRTT    = "latency/flows/srtt"
	LatencyFlowsSampled = "latency/flows/sampled"
)

// LatencyFlowsTree is the per-flow detail subtree. Its evidence names the
// flows with the most retransmits, with their smoothed RTT.
func LatencyFlowsTree() []Metric {
	return []Metric{
		{ID: LatencyFlows, Title: "Flows retransmitting", Unit: "flows", Kind: Gauge,
			Description: "TCP flows that retransmitted during the interval, among those sampled (BPF, tracepoint " +
				"tcp_probe, at most one sample per flow every 100 ms, taken at the first segment of a clock tick, and a per-CPU cap). The evidence lists the " +
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
