package catalog

import (
	"fmt"
	"strings"
)

const (
	TCPReset         = "tcp_reset"
	TCPResetSent     = "tcp_reset/sent"
	TCPResetReceived = "tcp_reset/received"
)

// TCPResetTree is the fixed part of the tcp_reset branch; one child per
// reason (sent) or socket state (received) is added as the kernel reports it.
func TCPResetTree() []Metric {
	return []Metric{
		{
			ID: TCPReset, Title: "TCP resets", Unit: "resets/s", Kind: Rate,
			Description: "TCP resets sent and received by this node. A reset ends a connection abruptly: " +
				"the application sees ECONNRESET or ECONNREFUSED. Open the children to see which side sent them " +
				"and the kernel's reason, and under each reason the pods, containers or namespaces that reset most; " +
				"the evidence lists the 5-tuples and who owns the network namespace of each.",
			Threshold: &Threshold{Warn: 20, Crit: 200, Hold: 1},
		},
		{
			ID: TCPResetSent, Title: "Resets sent", Unit: "resets/s", Kind: Rate,
			Description: "Resets this node's kernel sent, by the kernel's own reason (enum sk_rst_reason). " +
				"Sent resets are decisions of this host: no listener, an application closing with unread data, " +
				"a linger timeout, memory pressure.",
		},
		{
			ID: TCPResetReceived, Title: "Resets received", Unit: "resets/s", Kind: Rate,
			Description: "Resets this node received from peers, by the state the local socket was in. " +
				"Received resets are decisions of the peer (or a middlebox): look at the peer's tcp_reset/sent.",
		},
	}
}

// resetReasonHelp enriches the kernel's reason names, which come from BTF at
// run time, with advice for the common ones. Reasons missing here still get
// a metric with a generic description.
var resetReasonHelp = map[string]string{
	"no_socket": "A segment arrived for which no socket exists: a connection attempt to a port with no listener, " +
		"or a segment for a connection this host already forgot (after a restart or a TIME_WAIT recycle). " +
		"Usual causes: a service down or not yet listening, port scans, clients retrying against a stopped backend. " +
		"Check the evidence's destination ports against `ss -ltn`.",
	"tcp_abort_on_close": "An application closed a socket that still had unread received data, so the kernel " +
		"reset the connection instead of a graceful FIN (TCPAbortOnClose). Usual causes: a server that stops " +
		"reading a request early, or a proxy dropping a client. Check which local port the evidence shows.",
	"tcp_abort_on_linger": "A socket closed with TCP_LINGER2 < 0 while in FIN_WAIT2, so the kernel reset rather " +
		"than wait for the peer's FIN (TCPAbortOnLinger). Usually a deliberate application setting.",
	"tcp_abort_on_memory": "The kernel reset orphaned connections because TCP memory was exhausted " +
		"(TCPAbortOnMemory). Check net.ipv4.tcp_mem and tcp_max_orphans, and the node's socket memory use.",
	"tcp_abort_on_data": "Data arrived on a socket the application had already closed, so the kernel reset it " +
		"(TCPAbortOnData).",
	"tcp_abort_on_timeout": "A connection timed out after too many retransmissions or keepalive probes " +
		"(TCPAbortOnTimeout). Look at the latency root for retransmits and at the peer's reachability.",
	"tcp_state": "The kernel reset a connection because of its state, most often an application closing an " +
		"established socket with SO_LINGER {on, 0} (an abortive close, counted as TCPAbortOnData). " +
		"Usually deliberate in load balancers and connection pools; a sudden rise means a client behaviour change.",
	"tcp_invalid_ack_sequence": "A segment acknowledged data never sent. Causes: a middlebox rewriting " +
		"sequence numbers, or a half-open connection after a peer restarted.",
	"tcp_rfc7323_paws": "A segment failed the PAWS timestamp check (RFC 7323): often NAT mixing clients " +
		"with different timestamp clocks.",
	"not_specified": "The kernel sent a reset without a specific reason code. Check the evidence for the " +
		"socket state and ports.",
}

// resetReasonNoThreshold lists reasons that say nothing about health by
// themselves, so they get no default threshold.
var resetReasonNoThreshold = map[string]bool{"not_specified": true}

// ResetSentReason is the child metric for one kernel reset reason.
func ResetSentReason(reason string) Metric {
	desc, ok := resetReasonHelp[reason]
	if !ok {
		desc = fmt.Sprintf("Resets the kernel sent with reason SK_RST_REASON_%s (a name read from this kernel's BTF). "+
			"See include/net/rstreason.h in the kernel source for what triggers it.", strings.ToUpper(reason))
	}
	m := Metric{ID: TCPResetSent + "/" + reason, Title: "Sent: " + reason, Unit: "resets/s", Kind: Rate, Description: desc}
	if !resetReasonNoThreshold[reason] {
		m.Threshold = &Threshold{Warn: 1, Crit: 10, Hold: 1}
	}
	return m
}

// ResetReceivedState is the child metric for resets received in one socket state.
func ResetReceivedState(state string) Metric {
	return Metric{
		ID: TCPResetReceived + "/" + state, Title: "Received in " + state, Unit: "resets/s", Kind: Rate,
		Description: fmt.Sprintf("Resets received from peers while the local socket was in %s. "+
			"In syn_sent the peer refused a connection (nothing listening there); in established or close_wait "+
			"the peer aborted a live connection. The evidence names the peers.", strings.ToUpper(state)),
		Threshold: &Threshold{Warn: 1, Crit: 10, Hold: 1},
	}
}

// Fallback children when BPF is unavailable: /proc counters that correspond
// to kernel reasons, named like them so trees from both sources read alike.
var ProcResetCounters = []struct {
	Counter string // TcpExt field in /proc/net/netstat
	Reason  string
}{
	{"TCPAbortOnClose", "tcp_abort_on_close"},
	{"TCPAbortOnData", "tcp_abort_on_data"},
	{"TCPAbortOnLinger", "tcp_abort_on_linger"},
	{"TCPAbortOnMemory", "tcp_abort_on_memory"},
	{"TCPAbortOnTimeout", "tcp_abort_on_timeout"},
}

// ResetSentOther is the fallback child for sent resets no /proc counter explains.
func ResetSentOther() Metric {
	return Metric{ID: TCPResetSent + "/other", Title: "Sent: other", Unit: "resets/s", Kind: Rate,
		Description: "Sent resets (Tcp OutRsts) not explained by a TCPAbortOn* counter, e.g. answers to segments " +
			"for ports with no listener. Only /proc counters are available on this node, so the kernel's reasons " +
			"cannot be split further; the node's Hello says why BPF is unavailable."}
}

// ResetReceivedProc is the fallback for received resets (Tcp EstabResets).
func ResetReceivedProc() Metric {
	return Metric{ID: TCPResetReceived + "/established", Title: "Received in established", Unit: "resets/s", Kind: Rate,
		Description: "Connections that went straight from ESTABLISHED or CLOSE_WAIT to CLOSED (Tcp EstabResets): " +
			"mostly resets received from peers, though local aborts count too, and resets refusing a connect " +
			"are missing. Only /proc counters are available on this node; the Hello says why.",
		Threshold: &Threshold{Warn: 1, Crit: 10, Hold: 1}}
}
