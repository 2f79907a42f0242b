package catalog

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/nbs-project/nbs/internal/schema"
)

// The ping branch: how long does the network take? One child per target
// (ping/<target>), each timed by kernel socket timestamps, and the clock's
// sync state (ping/clock).
const (
	Ping              = "ping"
	PingClock         = "ping/clock"
	PingClockOffset   = "ping/clock/offset"
	PingClockMaxError = "ping/clock/max_error"
)

// Children of each ping/<target>.
const (
	PingKernelRTT  = "kernel_rtt"
	PingHostDelay  = "host_delay"
	PingSend       = "host_delay/send"
	PingQdisc      = "host_delay/qdisc"
	PingReceive    = "host_delay/receive"
	PingLoss       = "loss"
	PingJitter     = "jitter"
	PingLocalDrops = "local_drops"
	PingSent       = "sent"
	PingLost       = "lost"
)

// baselineLatency judges a latency with no absolute meaning (a peer across
// the room and one across an ocean differ 1000-fold) against its own
// moving median: 30 intervals (5 minutes at the default 10 s), WARN at 3x,
// CRIT at 10x, held for 3 intervals so a burst of slow echoes (a busy
// peer) does not page. On microsecond RTTs (same host, same rack) 3x is
// still nothing anyone would act on, so nothing below 1 ms is raised.
func baselineLatency() *Threshold {
	return &Threshold{Warn: 3, Crit: 10, Hold: 3, Baseline: 30, Floor: 1}
}

// hostLatency judges time this host adds, which has an absolute meaning:
// it should be near zero anywhere. A baseline would be a fraction of a
// millisecond on an idle host and flap on every scheduling hiccup (measured
// on a loaded 2-vCPU lab: several false WARNs per 100 intervals at 3x the
// median), so the levels are absolute: p99 of 50 ms is a host in trouble,
// 500 ms is where application and TCP timeouts fire.
func hostLatency() *Threshold {
	return &Threshold{Warn: 50, Crit: 500, Hold: 2}
}

func pingHistogram(id, title, desc string, thr *Threshold) Metric {
	return Metric{ID: id, Title: title, Unit: "ms", Kind: Histogram, Quantile: 0.99, Scale: 1e6, Description: desc, Threshold: thr}
}

// PingTree is the fixed part of the ping branch; targets are added as they
// are configured (PingTarget).
func PingTree() []Metric {
	return []Metric{
		{
			ID: Ping, Title: "Ping", Unit: "ms", Kind: Gauge,
			Description: "How long does the network take? This node pings its targets (from --ping.targets) and the " +
				"fleet peers the collector assigns it, timing every echo with kernel timestamps. The headline is the " +
				"worst target's round-trip time at p99 this interval, as an application sees it (the user-space RTT, " +
				"what ping(8) shows). With no target, or when every echo of the interval was lost, it has no value " +
				"(\"—\" in the tree, a gap in the chart, left out of averages and percentiles; never 0 ms, which " +
				"would read as a fast network): there is no round trip to speak of. With no target that is OK. Loss " +
				"is not folded into it: a target that answers nothing has no RTT, and its loss child turns the state " +
				"red instead. The state is the " +
				"worst of the children: open the red target, then its children say whether the time is spent in the " +
				"network (kernel_rtt), on this host (host_delay, and which stage), or lost (loss).",
		},
		{
			ID: PingClock, Title: "Clock synchronised", Unit: "1 = synced", Kind: Gauge,
			Description: "Whether the kernel considers this node's clock synchronised (adjtimex: not TIME_ERROR and " +
				"STA_UNSYNC clear, i.e. an NTP or PTP daemon is disciplining it). Round-trip times are measured on one " +
				"clock and do not depend on it, but times compared across nodes (one-way delays, event order in the " +
				"fleet) only mean something between synced clocks. No default threshold: set one (below 1) where " +
				"cross-node comparisons matter. Next: chronyc tracking, timedatectl.",
		},
		{
			ID: PingClockOffset, Title: "Clock offset", Unit: "ms", Kind: Gauge,
			Description: "The offset the kernel's clock discipline is still correcting (adjtimex offset), as set by " +
				"the time daemon; near 0 on a well-synced node.",
		},
		{
			ID: PingClockMaxError, Title: "Clock maximum error", Unit: "ms", Kind: Gauge,
			Description: "The kernel's bound on this clock's error (adjtimex maxerror). It grows by 0.5 ms per second " +
				"while no time daemon updates it; 16 s means unsynchronised.",
		},
	}
}

// PingSegment turns a target's name into an id segment (schema.Segment) of
// at most 128 bytes. A longer one keeps its first 119 bytes and a hash of
// the whole, so that two long names sharing a prefix (node names run to
// 253 bytes) stay two targets. The name "clock" is taken by ping/clock, so
// such a target becomes "clock_".
func PingSegment(name string) string {
	s := schema.Segment(name)
	if len(s) > maxPingSegment {
		h := fnv.New32a()
		h.Write([]byte(s))
		s = fmt.Sprintf("%s-%08x", s[:maxPingSegment-9], h.Sum32())
	}
	if s == "clock" {
		return "clock_"
	}
	return s
}

const maxPingSegment = 128

// PingTargetID is the id of one target's subtree.
func PingTargetID(name string) string { return Ping + "/" + PingSegment(name) }

// PingTarget is the subtree for one target: id from PingTargetID, address
// the IP address pinged, namedBy the configuration sources that asked for
// it (for the descriptions).
func PingTarget(id, address string, namedBy ...string) []Metric {
	at := id
	if address != "" && address != strings.TrimPrefix(id, Ping+"/") {
		at = fmt.Sprintf("%s (%s)", id, address)
	}
	name := strings.TrimPrefix(at, Ping+"/")
	named := ""
	switch {
	case len(namedBy) == 1:
		named = " Named by " + namedBy[0] + "."
	case len(namedBy) > 1:
		named = " Named by " + strings.Join(namedBy[:len(namedBy)-1], ", ") + " and " + namedBy[len(namedBy)-1] +
			": one address, pinged once."
	}
	return []Metric{
		pingHistogram(id, "RTT to "+name,
			"Round-trip time of ICMP echoes to "+name+" as an application on this node sees it: sendto() to the reply "+
				"read in user space (user RTT), the same quantity as `ping -U`. It is the sum of the network's part "+
				"(kernel_rtt) and this host's part (host_delay). No threshold of its own: kernel_rtt is judged "+
				"against its own baseline, host_delay against absolute levels, and loss counts what never came back."+named, nil),
		pingHistogram(id+"/"+PingKernelRTT, "Kernel RTT",
			"Time from the driver sending the echo request (software TX timestamp, SCM_TSTAMP_SND) to the reply "+
				"entering this host's stack (software RX timestamp): the network, the peer's stack and the peer's "+
				"queues, without this host's qdisc, scheduling or the agent itself. A rise here while host_delay stays "+
				"flat means the path or the peer got slower: look at the peer's tree (its host_delay and latency "+
				"root) and the network between. Judged against its own baseline (WARN at 3x, CRIT at 10x the "+
				"moving median of p99, held for 3 intervals).", baselineLatency()),
		pingHistogram(id+"/"+PingHostDelay, "Host-side delay",
			"The part of the RTT spent on this node: user RTT minus kernel RTT, i.e. from sendto() to the driver "+
				"(send + qdisc) plus from the reply's arrival to the agent reading it (receive). A rise means this "+
				"host is queueing or slow to schedule: its children say which stage. Bufferbloat in a local qdisc "+
				"shows here (and in qdisc) while kernel_rtt stays flat. WARN at a p99 of 50 ms, CRIT at 500 ms, "+
				"held for 2 intervals.", hostLatency()),
		pingHistogram(id+"/"+PingSend, "Send path",
			"From sendto() to the request entering the device's queueing layer (SCM_TSTAMP_SCHED): the local IP "+
				"stack, routing and netfilter output hooks. Normally microseconds; a rise points at CPU contention "+
				"or heavy netfilter rules.", nil),
		pingHistogram(id+"/"+PingQdisc, "Qdisc wait",
			"From the queueing layer to the driver (SCM_TSTAMP_SCHED to SCM_TSTAMP_SND): time the echo request "+
				"waited behind other traffic in this host's egress qdisc. Hundreds of milliseconds mean bufferbloat: a "+
				"shaper (tbf, htb) or a deep fifo filled by bulk traffic. Next: `tc -s qdisc show` for the device's "+
				"backlog and drops, and the latency root's qdisc children. WARN at a p99 of 50 ms, CRIT at 500 ms.", hostLatency()),
		pingHistogram(id+"/"+PingReceive, "Receive path",
			"From the reply entering this host's stack (software RX timestamp) to the agent reading it: softirq "+
				"processing, socket wake-up and scheduling of the agent. A rise alone means this node's CPUs are "+
				"busy (it delays every application's receive the same way); compare with latency/softnet.", nil),
		{
			ID: id + "/" + PingLoss, Title: "Loss", Unit: "%", Kind: Gauge,
			Description: "Echoes to " + name + " with no reply within the timeout, as a percentage of the last 100 " +
				"echoes answered or given up on (about 100 s at the default 1 s spacing), so 1 % is one lost echo. " +
				"Requests dropped before leaving this host count too (see local_drops). Usual causes: the target is down " +
				"or unreachable, a firewall, congestion dropping packets on the path or at the peer (see the peer's " +
				"drops root), ICMP rate limiting by routers. WARN at 1 %, CRIT at 5 %.",
			Threshold: &Threshold{Warn: 1, Crit: 5, Hold: 1},
		},
		{
			ID: id + "/" + PingJitter, Title: "Jitter", Unit: "ms", Kind: Gauge,
			Description: "Variation of the kernel RTT from one echo to the next, smoothed as RFC 3550 interarrival " +
				"jitter (J += (|D| - J)/16, D the difference of consecutive RTTs); the user RTT is used for echoes " +
				"without kernel timestamps. High jitter with a flat median means queues on the path fill and drain. " +
				"No default threshold: what matters depends on the application (real-time media cares from ~30 ms).",
		},
		{
			ID: id + "/" + PingSent, Title: "Echoes sent", Unit: "echoes/s", Kind: Rate,
			Description: "Echo requests to " + name + " whose outcome is known: answered, or given up on after the " +
				"timeout (so an echo still in flight at the end of an interval counts in the next). With lost it " +
				"gives loss as counts, which add up over nodes and time where the loss percentage cannot: loss " +
				"over any period is lost / sent. Answered echoes (sent - lost) are exactly the observations of the " +
				"RTT histogram.",
		},
		{
			ID: id + "/" + PingLost, Title: "Echoes lost", Unit: "echoes/s", Kind: Rate,
			Description: "Echo requests to " + name + " with no reply within the timeout, including those that never " +
				"left this host (local_drops). The mergeable form of loss: divide by sent over the same period. " +
				"No threshold of its own: the loss child judges the recent percentage.",
		},
		{
			ID: id + "/" + PingLocalDrops, Title: "Local drops", Unit: "drops/s", Kind: Rate,
			Description: "Echo requests that never left this host: sendto() failed with ENOBUFS (the egress qdisc was " +
				"full), EAGAIN (the socket's send buffer was full of requests still queued) or EPERM (a local firewall " +
				"rule). Counted in loss as well; non-zero here means the loss is this host's own doing. Next: " +
				"`tc -s qdisc show` (drops, backlog), `nft list ruleset`.",
		},
	}
}
