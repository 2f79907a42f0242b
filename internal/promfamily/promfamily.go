// Package promfamily names the metric tree in Prometheus terms: which
// family (metric name) and labels a tree path is exported as. The
// collector's exports (collector/export) and the catalogue's reference
// (docs/metrics.md, agent/catalog/gendocs) read the same rules, so what
// the documentation promises is what a scrape returns.
//
// One family is one level of one breakdown: a reason's counter and its
// owners' are different families (nbs_tcp_resets_total and
// nbs_tcp_resets_by_owner_total), so summing a family never counts a
// reset twice. The levels above a breakdown (the root, a direction) are
// in the same family with the finer labels absent ("" is an absent label
// to Prometheus): nbs_tcp_resets_total{reason=""} is the node's total,
// nbs_tcp_resets_total{reason!=""} its reasons. A child exists only while
// it is raised or moving (the agent streams nothing else), so the total
// is a series of its own rather than a sum the reader would have to make.
//
// A path no rule names (a new agent's metric, say) is still exported, in
// the generic families nbs_tree_increase_total and nbs_tree_value with the
// path as a label: nothing the tree holds is left out, and nothing an
// agent sends can take a documented family's name with another type.
package promfamily

import (
	"slices"
	"strconv"
	"strings"
)

// Type is a family's Prometheus type.
type Type int

const (
	Counter Type = iota + 1 // a rate's increases, summed: ends in _total
	Gauge                   // a gauge's value, or a histogram's headline quantile
)

// Kind is the tree's kind of a metric (store.Kind and nbs.v1.MetricKind
// share the numbers).
type Kind int

const (
	Rate      Kind = 1
	GaugeKind Kind = 2
	Histogram Kind = 3
)

// Family is one exported metric name.
type Family struct {
	Name string
	Help string
	Type Type
	// Labels are the labels the family has beyond node and tenant, in the
	// order the rules fill them; a histogram family ends with quantile.
	Labels []string
	// Scale turns the tree's unit into the family's base unit
	// (milliseconds to seconds, percent to a ratio); 0 means 1.
	Scale float64
}

// The generic families: every path no rule names.
var (
	genericCounter = Family{Name: "nbs_tree_increase_total", Type: Counter, Labels: []string{"path"},
		Help: "A rate of the metric tree that no named family covers: the sum of its increases, in the tree's unit (label path)."}
	genericGauge = Family{Name: "nbs_tree_value", Type: Gauge, Labels: []string{"path", "unit", "quantile"},
		Help: "A gauge or a histogram's headline quantile of the metric tree that no named family covers, in the tree's unit (labels path and unit)."}
)

const (
	ms      = 1e-3
	percent = 1e-2
	ns      = 1e-9
)

// rule maps a path pattern ("*" is one segment, captured into the next of
// labels) to a family.
type rule struct {
	pattern string
	segs    []string // pattern split at "/", once
	family  *Family
	idx     []int // for each capture, its index in family.Labels
	kind    Kind
}

// Rules is the table, built once by New: which path is which family.
type Rules struct {
	rules    []rule
	families []*Family
}

// New builds the table. Order matters: the first rule that matches wins,
// so a named child (drops/conntrack/usage) comes before its pattern
// (drops/*/*).
func New() *Rules {
	r := &Rules{}
	fam := func(name, help string, t Type, scale float64, labels ...string) *Family {
		f := &Family{Name: name, Help: help, Type: t, Labels: labels, Scale: scale}
		r.families = append(r.families, f)
		return f
	}
	// A wrong rule is a bug of this table, found by its test (every rule
	// is built by New): it panics here, never while exporting.
	add := func(pattern string, kind Kind, f *Family, labels ...string) {
		if strings.Count(pattern, "*") != len(labels) {
			panic("promfamily: rule " + pattern + " captures a different number of labels than it names")
		}
		if (f.Type == Counter) != (kind == Rate) || (kind == Histogram) != (len(f.Labels) > 0 && f.Labels[len(f.Labels)-1] == "quantile") {
			panic("promfamily: rule " + pattern + " has a kind its family " + f.Name + " cannot hold")
		}
		idx := make([]int, len(labels))
		for i, l := range labels {
			idx[i] = slices.Index(f.Labels, l)
			if idx[i] < 0 {
				panic("promfamily: rule " + pattern + " fills label " + l + ", which " + f.Name + " does not have")
			}
		}
		r.rules = append(r.rules, rule{pattern: pattern, segs: strings.Split(pattern, "/"), family: f, idx: idx, kind: kind})
	}

	resets := fam("nbs_tcp_resets_total", "TCP resets sent and received (tree: tcp_reset); the node's total has no direction, a direction's total no reason.", Counter, 0, "direction", "reason")
	resetOwners := fam("nbs_tcp_resets_by_owner_total", "TCP resets of one direction and reason counted in one owner's network namespace, or owner=\"other\" for the rest (tree: tcp_reset/<direction>/<reason>/<owner>).", Counter, 0, "direction", "reason", "owner")
	add("tcp_reset", Rate, resets)
	add("tcp_reset/*", Rate, resets, "direction")
	add("tcp_reset/*/*", Rate, resets, "direction", "reason")
	add("tcp_reset/*/*/*", Rate, resetOwners, "direction", "reason", "owner")

	ctUsage := fam("nbs_conntrack_usage_ratio", "Connection tracking table entries against its maximum (tree: drops/conntrack/usage).", Gauge, percent)
	ctEntries := fam("nbs_conntrack_entries", "Connection tracking table entries (tree: drops/conntrack/entries).", Gauge, 0)
	ctEvents := fam("nbs_conntrack_events_total", "Connection tracking failures by kind: drop, insert_failed, early_drop (tree: drops/conntrack/<event>).", Counter, 0, "event")
	add("drops/conntrack/usage", GaugeKind, ctUsage)
	add("drops/conntrack/entries", GaugeKind, ctEntries)
	add("drops/conntrack/*", Rate, ctEvents, "event")
	dev := fam("nbs_device_drops_packets_total", "Packets the kernel's device statistics count as dropped or in error, by counter (rx_missed, rx_fifo, tx_errors, …) (tree: drops/device/<counter>).", Counter, 0, "counter")
	devBy := fam("nbs_device_drops_by_device_packets_total", "A device statistic's count on one device (tree: drops/device/<counter>/<device>).", Counter, 0, "counter", "device")
	add("drops/device/*", Rate, dev, "counter")
	add("drops/device/*/*", Rate, devBy, "counter", "device")
	drops := fam("nbs_drops_packets_total", "Packets the kernel dropped, by the kernel's drop reason (tree: drops); the node's total has no reason.", Counter, 0, "reason")
	dropOwners := fam("nbs_drops_by_owner_packets_total", "Drops of one reason counted in one owner's network namespace, or owner=\"other\" (tree: drops/<reason>/<owner>).", Counter, 0, "reason", "owner")
	add("drops", Rate, drops)
	add("drops/*", Rate, drops, "reason")
	add("drops/*/*", Rate, dropOwners, "reason", "owner")

	add("latency", Rate, fam("nbs_latency_events_total", "Events that add latency on this host: retransmissions, timeouts, queue overflows (tree: latency).", Counter, 0))
	add("latency/retransmits", Rate, fam("nbs_tcp_retransmitted_segments_total", "TCP segments retransmitted (tree: latency/retransmits; the kernel's TcpRetransSegs).", Counter, 0))
	add("latency/rto", Rate, fam("nbs_tcp_rto_total", "TCP retransmission timeouts (tree: latency/rto).", Counter, 0))
	add("latency/lost_retransmits", Rate, fam("nbs_tcp_lost_retransmits_total", "TCP retransmissions that were lost again (tree: latency/lost_retransmits).", Counter, 0))
	add("latency/listen_overflows", Rate, fam("nbs_tcp_listen_overflows_total", "Connections refused because a listen queue was full (tree: latency/listen_overflows).", Counter, 0))
	add("latency/listen_drops", Rate, fam("nbs_tcp_listen_drops_total", "Connections dropped at a listener (tree: latency/listen_drops).", Counter, 0))
	sock := fam("nbs_tcp_socket_drops_segments_total", "Segments dropped for socket memory, by queue (tree: latency/socket_drops); the total has no queue.", Counter, 0, "queue")
	add("latency/socket_drops", Rate, sock)
	add("latency/socket_drops/*", Rate, sock, "queue")
	add("latency/memory_pressure", Rate, fam("nbs_tcp_memory_pressure_total", "Times TCP entered memory pressure (tree: latency/memory_pressure).", Counter, 0))
	softnet := fam("nbs_softnet_events_total", "Softnet backlog events: dropped packets and time squeezes (tree: latency/softnet); the total has no event.", Counter, 0, "event")
	add("latency/softnet", Rate, softnet)
	add("latency/softnet/*", Rate, softnet, "event")
	tx := fam("nbs_tx_latency_seconds", "Transmit latency on this host, a quantile (tree: latency/tx); the whole path has no stage.", Gauge, ms, "stage", "quantile")
	add("latency/tx", Histogram, tx)
	add("latency/tx/*", Histogram, tx, "stage")
	qd := fam("nbs_qdisc_latency_seconds", "Time packets wait in queueing disciplines, a quantile (tree: latency/qdisc); every device has no device.", Gauge, ms, "device", "quantile")
	add("latency/qdisc", Histogram, qd)
	add("latency/qdisc/*", Histogram, qd, "device")
	sizes := fam("nbs_packet_sent_size_bytes", "Sizes of packets the stack handed network devices, before segmentation, a quantile (tree: latency/sizes); every device has no device.", Gauge, 0, "device", "quantile")
	add("latency/sizes", Histogram, sizes)
	add("latency/sizes/*", Histogram, sizes, "device")
	add("latency/sizes/*/xmit", Histogram, fam("nbs_packet_xmit_size_bytes", "Sizes of packets a device's driver was handed, after software segmentation, a quantile (tree: latency/sizes/<device>/xmit).", Gauge, 0, "device", "quantile"), "device")
	add("latency/sizes/*/received", Histogram, fam("nbs_packet_received_size_bytes", "Sizes of packets the stack received from a device, after GRO, a quantile (tree: latency/sizes/<device>/received).", Gauge, 0, "device", "quantile"), "device")
	rx := fam("nbs_rx_latency_seconds", "Receive latency on this host, a quantile (tree: latency/rx), by stage and protocol.", Gauge, ms, "stage", "protocol", "quantile")
	add("latency/rx", Histogram, rx)
	add("latency/rx/*", Histogram, rx, "stage")
	add("latency/rx/*/*", Histogram, rx, "stage", "protocol")
	add("latency/flows", GaugeKind, fam("nbs_tcp_flows", "TCP flows the agent tracks (tree: latency/flows).", Gauge, 0))
	add("latency/flows/sampled", GaugeKind, fam("nbs_tcp_flows_sampled", "TCP flows sampled for round-trip time (tree: latency/flows/sampled).", Gauge, 0))
	add("latency/flows/srtt", Histogram, fam("nbs_tcp_srtt_seconds", "Smoothed round-trip time of sampled TCP flows, a quantile (tree: latency/flows/srtt).", Gauge, ms, "quantile"))
	add("latency/ecn", Rate, fam("nbs_ecn_ce_packets_total", "Packets received with ECN congestion experienced (CE) marks (tree: latency/ecn).", Counter, 0))
	add("latency/ecn/ce_share", GaugeKind, fam("nbs_ecn_ce_ratio", "Share of ECN-capable packets that carried a CE mark (tree: latency/ecn/ce_share).", Gauge, percent))
	add("latency/ecn/delivered_ce", Rate, fam("nbs_tcp_delivered_ce_segments_total", "Segments TCP delivered with CE marks (tree: latency/ecn/delivered_ce; the kernel's TCPDeliveredCE).", Counter, 0))
	add("latency/ecn/tcp_ecn", GaugeKind, fam("nbs_tcp_ecn_mode", "The node's net.ipv4.tcp_ecn setting (tree: latency/ecn/tcp_ecn).", Gauge, 0))
	ecnDev := fam("nbs_ecn_ce_packets_by_device_total", "Packets received with CE marks, counted per device by BPF while latency/ecn is in trouble or expanded (tree: latency/ecn/devices); every device has no device.", Counter, 0, "device")
	add("latency/ecn/devices", Rate, ecnDev)
	add("latency/ecn/devices/*", Rate, ecnDev, "device")
	add("latency/ecn/devices/*/*", Rate, fam("nbs_ecn_ce_packets_by_peer_total", "Packets received with CE marks per device and source address, other for the peers beyond the named ones (tree: latency/ecn/devices/<device>/<peer>).", Counter, 0, "device", "peer"), "device", "peer")

	add("dns", Rate, fam("nbs_dns_queries_total", "DNS queries the node's clients sent over UDP (tree: dns).", Counter, 0))
	add("dns/latency", Histogram, fam("nbs_dns_latency_seconds", "Time from a DNS query leaving the node to its answer arriving, a quantile (tree: dns/latency).", Gauge, ms, "quantile"))
	dnsErr := fam("nbs_dns_error_answers_total", "DNS answers with a response code other than NOERROR, by rcode (tree: dns/errors); the total has no rcode.", Counter, 0, "rcode")
	add("dns/errors", Rate, dnsErr)
	add("dns/errors/*", Rate, dnsErr, "rcode")
	add("dns/errors/*/*", Rate, fam("nbs_dns_error_answers_by_owner_total", "DNS error answers of one rcode to one owner's network namespace, or owner=\"other\" (tree: dns/errors/<rcode>/<owner>).", Counter, 0, "rcode", "owner"), "rcode", "owner")
	add("dns/timeouts", Rate, fam("nbs_dns_timeouts_total", "DNS queries with no answer within the timeout (tree: dns/timeouts).", Counter, 0))
	add("dns/timeouts/*", Rate, fam("nbs_dns_timeouts_by_owner_total", "DNS queries unanswered, sent from one owner's network namespace, or owner=\"other\" (tree: dns/timeouts/<owner>).", Counter, 0, "owner"), "owner")
	dnsClients := fam("nbs_dns_queries_by_owner_total", "DNS queries sent from one owner's network namespace, or owner=\"other\" (tree: dns/clients/<owner>); the total has no owner.", Counter, 0, "owner")
	add("dns/clients", Rate, dnsClients)
	add("dns/clients/*", Rate, dnsClients, "owner")
	dnsServers := fam("nbs_dns_queries_by_server_total", "DNS queries sent to one server, or server=\"other\" (tree: dns/servers/<server>); the total has no server.", Counter, 0, "server")
	add("dns/servers", Rate, dnsServers)
	add("dns/servers/*", Rate, dnsServers, "server")
	add("dns/servers/*/errors", Rate, fam("nbs_dns_server_error_answers_total", "DNS answers from one server with an error other than NXDOMAIN (tree: dns/servers/<server>/errors).", Counter, 0, "server"), "server")
	add("dns/servers/*/timeouts", Rate, fam("nbs_dns_server_timeouts_total", "DNS queries to one server with no answer within the timeout (tree: dns/servers/<server>/timeouts).", Counter, 0, "server"), "server")

	add("ping", GaugeKind, fam("nbs_ping_delay_seconds", "The node's worst ping delay to its peers (tree: ping).", Gauge, ms))
	add("ping/clock", GaugeKind, fam("nbs_ping_clock_synced", "1 when the node's clock is synchronised (tree: ping/clock).", Gauge, 0))
	add("ping/clock/offset", GaugeKind, fam("nbs_ping_clock_offset_seconds", "The node's clock offset (tree: ping/clock/offset).", Gauge, ms))
	add("ping/clock/max_error", GaugeKind, fam("nbs_ping_clock_max_error_seconds", "The node's clock's maximum error (tree: ping/clock/max_error).", Gauge, ms))
	add("ping/*", Histogram, fam("nbs_ping_rtt_seconds", "Round-trip time of pings to a target, a quantile (tree: ping/<target>).", Gauge, ms, "target", "quantile"), "target")
	add("ping/*/kernel_rtt", Histogram, fam("nbs_ping_kernel_rtt_seconds", "Round-trip time between the kernels, a quantile (tree: ping/<target>/kernel_rtt).", Gauge, ms, "target", "quantile"), "target")
	host := fam("nbs_ping_host_delay_seconds", "Delay the two hosts add to a ping, a quantile, by stage (tree: ping/<target>/host_delay).", Gauge, ms, "target", "stage", "quantile")
	add("ping/*/host_delay", Histogram, host, "target")
	add("ping/*/host_delay/*", Histogram, host, "target", "stage")
	add("ping/*/loss", GaugeKind, fam("nbs_ping_loss_ratio", "Share of pings to a target lost (tree: ping/<target>/loss).", Gauge, percent, "target"), "target")
	add("ping/*/jitter", GaugeKind, fam("nbs_ping_jitter_seconds", "Jitter of pings to a target (tree: ping/<target>/jitter).", Gauge, ms, "target"), "target")
	add("ping/*/sent", Rate, fam("nbs_ping_echoes_sent_total", "Pings sent to a target (tree: ping/<target>/sent).", Counter, 0, "target"), "target")
	add("ping/*/lost", Rate, fam("nbs_ping_echoes_lost_total", "Pings to a target that got no answer (tree: ping/<target>/lost).", Counter, 0, "target"), "target")
	add("ping/*/local_drops", Rate, fam("nbs_ping_local_drops_total", "Pings to a target dropped on this host (tree: ping/<target>/local_drops).", Counter, 0, "target"), "target")

	add("agent", GaugeKind, fam("nbs_agent_cpu_ratio", "CPU the agent uses, as a share of one CPU (tree: agent).", Gauge, percent))
	bpfCPU := fam("nbs_agent_bpf_cpu_ratio", "CPU the agent's BPF programs use, as a share of one CPU (tree: agent/bpf/<program>).", Gauge, percent, "program")
	bpfRuns := fam("nbs_agent_bpf_runs_per_second", "Runs per second of the agent's BPF programs (tree: agent/bpf); all programs have no program.", Gauge, 0, "program")
	add("agent/bpf", GaugeKind, bpfRuns)
	add("agent/bpf/*", GaugeKind, bpfCPU, "program")
	add("agent/bpf/*/ns_per_run", GaugeKind, fam("nbs_agent_bpf_run_seconds", "Time one run of a BPF program takes (tree: agent/bpf/<program>/ns_per_run).", Gauge, ns, "program"), "program")
	add("agent/bpf/*/runs_per_sec", GaugeKind, bpfRuns, "program")
	add("agent/outbox", GaugeKind, fam("nbs_agent_outbox_reports", "Reports waiting in the agent's outbox (tree: agent/outbox).", Gauge, 0))
	add("agent/outbox/dropped", Rate, fam("nbs_agent_outbox_dropped_samples_total", "Samples the agent's outbox dropped when full (tree: agent/outbox/dropped).", Counter, 0))
	ev := fam("nbs_agent_evidence_events_total", "Evidence events the agent sent, by source (tree: agent/evidence); all sources have no source.", Counter, 0, "source")
	evDrop := fam("nbs_agent_evidence_dropped_events_total", "Evidence events the agent dropped at a cap, by source and cap (tree: agent/evidence/dropped).", Counter, 0, "source", "cap")
	add("agent/evidence", Rate, ev)
	add("agent/evidence/dropped", Rate, evDrop)
	add("agent/evidence/dropped/*", Rate, evDrop, "source")
	add("agent/evidence/dropped/*/*", Rate, evDrop, "source", "cap")
	add("agent/evidence/*", Rate, ev, "source")
	trig := fam("nbs_agent_triggered_sources", "Triggered sources attached (tree: agent/triggered; a source's series is 1 while attached).", Gauge, 0, "source")
	add("agent/triggered", GaugeKind, trig)
	add("agent/triggered/*", GaugeKind, trig, "source")
	r.families = append(r.families, &genericCounter, &genericGauge)
	return r
}

// Families lists every family the rules can produce, generic ones last.
func (r *Rules) Families() []*Family { return r.families }

// Match is where one path goes.
type Match struct {
	Family *Family
	// Values are the family's Labels' values, in their order; "" is absent.
	Values []string
	// Scale is what to multiply the tree's value by.
	Scale float64
}

// Lookup returns the family of path, a metric of the given kind, unit and
// headline quantile (histograms). A path whose kind differs from its
// rule's (an agent that calls tcp_reset a gauge) goes to a generic family:
// a family's type is fixed whatever an agent claims.
func (r *Rules) Lookup(path string, kind Kind, unit string, quantile float64) Match {
	segs := strings.Split(path, "/")
	for i := range r.rules {
		ru := &r.rules[i]
		caps, ok := matchPattern(ru.segs, segs)
		if !ok {
			continue
		}
		if ru.kind != kind {
			break
		}
		f := ru.family
		vals := make([]string, len(f.Labels))
		for j, at := range ru.idx {
			vals[at] = caps[j]
		}
		if kind == Histogram {
			vals[len(vals)-1] = FormatQuantile(quantile)
		}
		return Match{Family: f, Values: vals, Scale: scaleOf(f.Scale)}
	}
	if kind == Rate {
		return Match{Family: &genericCounter, Values: []string{path}, Scale: 1}
	}
	q := ""
	if kind == Histogram {
		q = FormatQuantile(quantile)
	}
	return Match{Family: &genericGauge, Values: []string{path, unit, q}, Scale: 1}
}

// Documented returns the family a catalogue template (tcp_reset/sent/<reason>)
// is exported as, for the reference: its placeholders match any segment.
func (r *Rules) Documented(template string, kind Kind) *Family {
	m := r.Lookup(template, kind, "", 0.99)
	return m.Family
}

func scaleOf(s float64) float64 {
	if s == 0 {
		return 1
	}
	return s
}

func matchPattern(ps, segs []string) ([]string, bool) {
	if len(ps) != len(segs) {
		return nil, false
	}
	for i, p := range ps {
		if p != "*" && p != segs[i] {
			return nil, false
		}
	}
	var caps []string
	for i, p := range ps {
		switch {
		case p == "*":
			caps = append(caps, segs[i])
		case p != segs[i]:
			return nil, false
		}
	}
	return caps, true
}

// FormatQuantile writes a quantile as Prometheus does ("0.99").
func FormatQuantile(q float64) string {
	if q <= 0 || q > 1 {
		return ""
	}
	return strconv.FormatFloat(q, 'f', -1, 64)
}
