package catalog

// drops/conntrack: the connection tracking table of the watched namespace,
// from /proc. Not in the drops headline: a packet conntrack drops is also a
// netfilter_drop.
const (
	DropsConntrack             = "drops/conntrack"
	DropsConntrackUsage        = "drops/conntrack/usage"
	DropsConntrackEntries      = "drops/conntrack/entries"
	DropsConntrackDrop         = "drops/conntrack/drop"
	DropsConntrackInsertFailed = "drops/conntrack/insert_failed"
	DropsConntrackEarlyDrop    = "drops/conntrack/early_drop"
)

// ConntrackTree is drops/conntrack and its children, defined while the
// namespace has connection tracking (nf_conntrack loaded).
func ConntrackTree() []Metric {
	return []Metric{
		{ID: DropsConntrack, Title: "Conntrack: packets dropped", Unit: "packets/s", Kind: Rate,
			Description: "Packets the connection tracker of the watched namespace dropped because it could not track " +
				"them: the table was full (drop) or the new entry clashed on insert (insert_failed), from " +
				"/proc/net/stat/nf_conntrack summed over CPUs. Each is also counted as drops/netfilter_drop, which is " +
				"why this is not part of the drops headline. The children say which, and how full the table is " +
				"(usage against nf_conntrack_max). `conntrack -S` shows the same counters, `conntrack -L` the entries.",
		},
		{ID: DropsConntrackUsage, Title: "Conntrack table usage", Unit: "%", Kind: Gauge,
			Description: "Entries in the watched namespace's connection tracking table as a share of its maximum " +
				"(nf_conntrack_count / nf_conntrack_max in /proc/sys/net/netfilter; the count is the namespace's, the " +
				"maximum the host's on recent kernels). At 100% the kernel evicts " +
				"unconfirmed entries (early_drop) and, failing that, drops new connections with \"nf_conntrack: table " +
				"full, dropping packet\" in the kernel log. Usual causes: a connection flood or scan, many short-lived " +
				"connections (DNS over UDP, health checks) with long timeouts, NAT for a busy service, a maximum left " +
				"at a small default. Look at what fills it (`conntrack -L | awk '{print $1}' | sort | uniq -c`, by " +
				"state and destination), shorten the timeouts that hold it (nf_conntrack_udp_timeout, " +
				"nf_conntrack_tcp_timeout_time_wait), or raise net.netfilter.nf_conntrack_max (settable only in the " +
				"host's initial namespace on recent kernels, and host-wide) with nf_conntrack_buckets.",
			Threshold: &Threshold{Warn: 80, Crit: 95, Hold: 1}},
		{ID: DropsConntrackEntries, Title: "Conntrack entries", Unit: "entries", Kind: Gauge,
			Description: "Entries in the watched namespace's connection tracking table (nf_conntrack_count); " +
				"drops/conntrack/usage relates it to the maximum. No threshold of its own: a count means trouble only " +
				"against the maximum."},
		{ID: DropsConntrackDrop, Title: "Conntrack: dropped, table full", Unit: "packets/s", Kind: Rate,
			Description: "Packets dropped because the connection tracking table was full and no entry could be " +
				"evicted to make room (the \"drop\" column of /proc/net/stat/nf_conntrack; the kernel logs " +
				"\"nf_conntrack: table full, dropping packet\"). Each is a new connection's packet lost: clients see " +
				"SYNs retried and connect timeouts. Any is a problem: see drops/conntrack/usage for what to do.",
			Threshold: &Threshold{Warn: 0.001, Crit: 10, Hold: 1}},
		{ID: DropsConntrackInsertFailed, Title: "Conntrack: insert failed", Unit: "packets/s", Kind: Rate,
			Description: "Packets dropped because their new conntrack entry could not be inserted: another packet " +
				"of the same connection created the same entry first and the clash could not be resolved (the " +
				"\"insert_failed\" column). Classic cause: UDP from one socket to two addresses at once through NAT, " +
				"as glibc's resolver sends A and AAAA queries in parallel to a DNS service (5 s DNS delays in " +
				"Kubernetes); options single-request-reopen or use-vc in resolv.conf, or a node-local DNS cache, avoid it.",
			Threshold: &Threshold{Warn: 0.001, Crit: 10, Hold: 1}},
		{ID: DropsConntrackEarlyDrop, Title: "Conntrack: early drops", Unit: "entries/s", Kind: Rate,
			Description: "Entries evicted to make room for new ones because the table was full (the \"early_drop\" " +
				"column): the table reached nf_conntrack_max. Unconfirmed or not yet assured connections lose their " +
				"state (a NATed flow may break). A warning that drops/conntrack/drop comes next; see " +
				"drops/conntrack/usage.",
			Threshold: &Threshold{Warn: 0.001, Crit: 100, Hold: 1}},
	}
}
