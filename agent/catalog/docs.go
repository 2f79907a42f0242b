package catalog

import (
	"maps"
	"slices"
)

//go:generate go run ./gendocs -o ../../docs/metrics.md

// Branch is one root and what can grow under it, for the documentation.
type Branch struct {
	Root string
	// Metrics are the branch's fixed metrics, root first.
	Metrics []Metric
	// Children are the shapes of children created at run time (one per
	// reason or target), with a placeholder in angle brackets in the id.
	Children []Metric
	// Notes lists named children worth documenting on their own (e.g.
	// reasons with specific advice).
	Notes []Metric
}

// Documented lists every branch of the catalogue. A branch added to the
// agent is added here, so docs/metrics.md covers it.
func Documented() []Branch {
	resets := Branch{
		Root:    TCPReset,
		Metrics: TCPResetTree(),
		Children: []Metric{ResetSentReason("<reason>"), ResetReceivedState("<state>"), ResetSentOther(), ResetReceivedProc(),
			OwnerChild(ResetSentReason("<reason>"), "<owner>", "<owner>", DefaultTopOwners),
			OwnerOtherChild(ResetSentReason("<reason>"), DefaultTopOwners),
			OwnerChild(ResetReceivedState("<state>"), "<owner>", "<owner>", DefaultTopOwners),
			OwnerOtherChild(ResetReceivedState("<state>"), DefaultTopOwners)},
	}
	for _, reason := range sortedKeys(resetReasonHelp) {
		resets.Notes = append(resets.Notes, ResetSentReason(reason))
	}
	latency := Branch{Root: Latency, Metrics: LatencyTree()}
	latency.Metrics = append(latency.Metrics, LatencyTXTree()...)
	latency.Metrics = append(latency.Metrics, LatencyQdiscTree()...)
	latency.Metrics = append(latency.Metrics, LatencySizesTree()...)
	latency.Metrics = append(latency.Metrics, LatencyFlowsTree()...)
	latency.Metrics = append(latency.Metrics, LatencyRXTree()...)
	latency.Metrics = append(latency.Metrics, ECNTree()...)
	latency.Metrics = append(latency.Metrics, ECNDevicesTree()...)
	latency.Children = append(latency.Children, QdiscDevice("<device>", "<device>", 0))
	latency.Children = append(latency.Children, SizesDevice("<device>", "<device>", 0)...)
	latency.Children = append(latency.Children, ECNDevice("<device>", "<device>", 0), ECNPeer("<device>", "<peer>", "<peer>"), ECNPeerOtherChild("<device>"))
	agent := Branch{Root: Agent, Metrics: AgentTree(),
		Children: slices.Concat(AgentProgram("<program>"), []Metric{AgentTriggeredSource("<source>", "<branch>"), AgentEvidenceReported("<source>")},
			AgentEvidenceDropped("<source>", []string{"<cap>"}))}
	drops := Branch{Root: Drops, Metrics: DropsTree(), Children: []Metric{DropReason("<reason>"), DropOverflow(),
		OwnerChild(DropReason("<reason>"), "<owner>", "<owner>", DefaultTopOwners),
		OwnerOtherChild(DropReason("<reason>"), DefaultTopOwners)}}
	for _, pc := range DropProcCounters() {
		drops.Children = append(drops.Children, pc.Metric)
	}
	drops.Children = append(drops.Children, ConntrackTree()...)
	drops.Children = append(drops.Children, DeviceTree()...)
	drops.Children = append(drops.Children, DeviceChild(Metric{ID: DropsDevice + "/<counter>", Title: "Device: <counter>",
		Unit: "packets/s", Description: "The device's count of its parent's counter, with the parent's threshold."},
		"<device>", "<device>"))
	for _, reason := range sortedKeys(dropReasonHelp) {
		drops.Notes = append(drops.Notes, DropReason(reason))
	}
	ping := Branch{Root: Ping, Metrics: PingTree(), Children: PingTarget(Ping+"/<target>", "")}
	dns := Branch{Root: DNS, Metrics: DNSTree(), Children: slices.Concat([]Metric{DNSRcode("<rcode>"),
		OwnerChild(DNSMetric(DNSClients), "<owner>", "<owner>", DefaultTopOwners),
		OwnerOtherChild(DNSMetric(DNSClients), DefaultTopOwners),
		OwnerChild(DNSRcode("<rcode>"), "<owner>", "<owner>", DefaultTopOwners),
		OwnerChild(DNSMetric(DNSTimeouts), "<owner>", "<owner>", DefaultTopOwners)},
		DNSServer("<server>", "<server>"), DNSServerOther())}
	for _, name := range sortedKeys(rcodeHelp) {
		dns.Notes = append(dns.Notes, DNSRcode(name))
	}
	return []Branch{resets, latency, drops, dns, ping, agent}
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
