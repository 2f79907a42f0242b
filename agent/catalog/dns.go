package catalog

import (
	"fmt"
	"strings"
)

// The dns root: name resolution as this node's clients see it. A root,
// not a branch of latency or drops: a failed lookup is neither a slow nor
// a lost packet, and the commonest "the network is slow" that is not the
// network is a resolver answering late, SERVFAIL or not at all. Its
// questions (which names fail, which server, whose pods) are its own, and
// so are its units (queries, answers by response code).
const (
	DNS         = "dns"
	DNSLatency  = "dns/latency"
	DNSErrors   = "dns/errors"
	DNSTimeouts = "dns/timeouts"
	DNSClients  = "dns/clients"
	DNSServers  = "dns/servers"
	// Segments under each server's child.
	DNSServerErrors   = "errors"
	DNSServerTimeouts = "timeouts"
)

// DNSTimeout is how long a query may wait for its answer before it counts
// as timed out: the resolver timeout of glibc, musl and dig (resolv.conf
// `timeout:5`), after which a client retries or gives up.
const DNSTimeout = 5

// DefaultTopServers is how many servers get a child of their own under
// dns/servers; the rest share dns/servers/other.
const DefaultTopServers = 8

const dnsHow = "BPF: UDP queries to port 53 sent by this node's sockets (every network namespace: pods, " +
	"containers, the host) are seen as they leave a device (tracepoint net_dev_queue) and matched to their " +
	"response arriving on one (netif_receive_skb) by namespace, addresses, ports and DNS id, in a bounded " +
	"table in the kernel. Queries a host forwards for others (a router) are not this node's and are left out; " +
	"DNS over TCP (a truncated answer's retry, zone transfers) and encrypted DNS (DoT, DoH) are not seen."

// rcodeNames are the response codes of RFC 1035 and RFC 2136 by value.
var rcodeNames = []string{"noerror", "formerr", "servfail", "nxdomain", "notimp", "refused",
	"yxdomain", "yxrrset", "nxrrset", "notauth", "notzone"}

// RcodeName is the lower-case mnemonic of a DNS response code, rcode_N
// for codes without one.
func RcodeName(rcode uint8) string {
	if int(rcode) < len(rcodeNames) {
		return rcodeNames[rcode]
	}
	return fmt.Sprintf("rcode_%d", rcode)
}

var rcodeHelp = map[string]string{
	"nxdomain": "Answers saying the name does not exist (NXDOMAIN). Many are normal where resolv.conf has search " +
		"domains: Kubernetes' ndots:5 makes a lookup of an external name try each search domain first, and each " +
		"try is an NXDOMAIN, so there is no default threshold. A sudden rise for one owner is a typo in a " +
		"configuration or a service deleted that clients still ask for: the evidence names the queries. Next: " +
		"`dig NAME` from the pod, `cat /etc/resolv.conf` there (ndots, search), a trailing dot on external names.",
	"servfail": "Answers saying the server failed to resolve the name (SERVFAIL): its upstream did not answer, " +
		"DNSSEC validation failed, or the zone is broken. The client gets an error, not an address. Next: the " +
		"evidence's server and names; on the resolver (CoreDNS, unbound, systemd-resolved) its logs and its " +
		"upstreams' reachability; `dig @SERVER NAME +dnssec` and `+cd` to tell DNSSEC from reachability.",
	"refused": "Answers saying the server refused the query (REFUSED): it does not serve this client (an ACL, " +
		"recursion off for this source address) or this zone. Usually a client pointed at the wrong server, or " +
		"a resolver's ACL that does not include a new pod or node network. Next: the evidence's server, the " +
		"client addresses, and the server's access configuration.",
	"formerr": "Answers saying the server could not parse the query (FORMERR): usually EDNS options a middlebox " +
		"or an old server does not understand.",
	"notimp": "Answers saying the server does not implement the query's kind (NOTIMP).",
}

// DNSErrorThreshold is the default of the response codes that mean
// resolution failed (servfail, refused): one a second for two intervals
// is a client failing over and over, not a blip; ten is an outage.
func dnsErrorThreshold() *Threshold { return &Threshold{Warn: 1, Crit: 10, Hold: 2} }

// DNSTree is the fixed part of the dns root; response codes, owners and
// servers are added as they are met.
func DNSTree() []Metric {
	return []Metric{
		{ID: DNS, Title: "DNS queries", Unit: "queries/s", Kind: Rate,
			Description: "DNS queries this node's clients sent, over UDP. " + dnsHow + " Children: the answers' " +
				"latency, the errors by response code, the queries that were never answered, and the queries by " +
				"client (the owners of the namespaces that asked: pods, containers, the host) and by server. The rate itself is no trouble; a sudden rise is a client in a retry loop or a cache " +
				"that stopped caching. The evidence of dns/latency, dns/errors and dns/timeouts names the slow or " +
				"failed queries (shown, like all evidence, only to staff and to the tenant of this node). " +
				"Measured always by default (--dns.always): the programs test every packet, at about a third of " +
				"a NetObserv-shaped tracker's cost. Over the agent's overhead budget they are detached for a rest " +
				"(agent/triggered says so, and why), and the dns root is absent meanwhile. Without BPF there is no " +
				"dns root: no kernel counter counts DNS, and the node's capabilities say why."},
		{ID: DNSLatency, Title: "DNS answer latency", Unit: "ms", Kind: Histogram, Quantile: 0.99, Scale: 1e6,
			Description: "Time from a query leaving this node's device to its answer arriving, as the kernel sees " +
				"both, per answered query; the headline is the p99. It is the resolver's answer time plus the " +
				"network's round trip, without the client's own scheduling. A resolver on the node or in the " +
				"cluster answers from its cache in well under a millisecond to a few; a cache miss costs its " +
				"upstream's time (tens of milliseconds to the internet). A p99 over 100 ms for two intervals is " +
				"lookups users feel; over 500 ms, clients near their retry timeouts. Queries never answered are not " +
				"here but in dns/timeouts. Answers slower than 100 ms are evidence, naming the query, the server and " +
				"the owner. Next: the evidence's servers; on the resolver, its cache hit rate and upstream latency; " +
				"`dig NAME @SERVER` from the owner's namespace.",
			Threshold: &Threshold{Warn: 100, Crit: 500, Hold: 2}},
		{ID: DNSErrors, Title: "DNS error answers", Unit: "answers/s", Kind: Rate,
			Description: "Answers with a response code other than NOERROR, one child per code met " +
				"(nxdomain, servfail, refused, ...), each split by owner. Each is evidence, naming the query, " +
				"the server and the owner. The children carry the thresholds: NXDOMAIN is often normal, SERVFAIL " +
				"and REFUSED never are."},
		{ID: DNSTimeouts, Title: "DNS queries unanswered", Unit: "queries/s", Kind: Rate,
			Description: fmt.Sprintf("Queries with no answer %d s after they were first sent (a retry with the same "+
				"id and port does not restart the clock): the resolver timeout of glibc, musl and dig, after which "+
				"the client retries or fails, so each costs a user at least that long. Causes: the server down or "+
				"unreachable, the query or answer dropped on the way (drops, a firewall, conntrack full), a resolver "+
				"overloaded or rate-limiting this client. An answer arriving later is not counted as an answer. "+
				"Each is evidence, naming the query, the server and the owner; the owner children add up to this. "+
				"Next: the evidence's server, `drops` on this node, `dig @SERVER NAME` from the owner's namespace. "+
				"The default threshold warns when timeouts recur two intervals running (a single lost datagram "+
				"is not an incident; one every 10 s for 20 s is users waiting) and is critical at one a second.",
				DNSTimeout),
			Threshold: &Threshold{Warn: 0.1, Crit: 1, Hold: 2}},
		{ID: DNSClients, Title: "DNS queries", Unit: "queries/s", Kind: Rate,
			Description: "The queries of the dns root by the owner of the network namespace that sent them: the " +
				"pods, containers or namespaces that asked most each get a child, the rest share other, so the " +
				"children add up to this exactly. A client in a retry loop, or one whose resolv.conf makes every " +
				"lookup several (search domains), shows here first."},
		{ID: DNSServers, Title: "DNS queries by server", Unit: "queries/s", Kind: Rate,
			Description: fmt.Sprintf("The queries of the dns root by the server they were sent to: the %d servers "+
				"asked most each get a child, with its error answers and timeouts under it; the rest share other, "+
				"so the children add up to this exactly. A server whose errors or timeouts rise while the others' "+
				"do not is the one to look at.", DefaultTopServers)},
	}
}

// DNSMetric is the metric of the fixed tree with id (the zero Metric for
// another id).
func DNSMetric(id string) Metric {
	for _, m := range DNSTree() {
		if m.ID == id {
			return m
		}
	}
	return Metric{}
}

// DNSRcode is the child of dns/errors for one response code.
func DNSRcode(name string) Metric {
	desc, ok := rcodeHelp[name]
	if !ok {
		desc = fmt.Sprintf("Answers with response code %s (RFC 1035, RFC 6895).", strings.ToUpper(name))
	}
	m := Metric{ID: DNSErrors + "/" + name, Title: "DNS answers " + strings.ToUpper(name), Unit: "answers/s", Kind: Rate,
		Description: desc}
	if name == "servfail" || name == "refused" {
		m.Threshold = dnsErrorThreshold()
	}
	return m
}

// DNSServer is the child of dns/servers for one server (id its metric
// segment, label its address and port), and its errors and timeouts.
func DNSServer(id, label string) []Metric {
	base := DNSServers + "/" + id
	return []Metric{
		{ID: base, Title: "DNS queries to " + label, Unit: "queries/s", Kind: Rate,
			Description: "Queries this node's clients sent to the DNS server " + label + "."},
		{ID: base + "/" + DNSServerErrors, Title: "DNS error answers from " + label, Unit: "answers/s", Kind: Rate,
			Description: "Answers from " + label + " with a response code other than NOERROR and NXDOMAIN (a name " +
				"that does not exist is the server working): SERVFAIL, REFUSED and the rarer ones. The evidence " +
				"under dns/errors names them.",
			Threshold: dnsErrorThreshold()},
		{ID: base + "/" + DNSServerTimeouts, Title: "DNS queries to " + label + " unanswered", Unit: "queries/s", Kind: Rate,
			Description: fmt.Sprintf("Queries to %s with no answer within %d s.", label, DNSTimeout),
			Threshold:   &Threshold{Warn: 0.1, Crit: 1, Hold: 2}},
	}
}

// DNSServerOther counts the servers without a child of their own.
func DNSServerOther() []Metric {
	ms := DNSServer(OwnerOther, "other servers")
	ms[0].Description = fmt.Sprintf("Queries to servers beyond the %d asked most. A server keeps its child once "+
		"it has one (until the agent restarts), so each server's series is continuous and the children add up "+
		"to dns/servers exactly.", DefaultTopServers)
	return ms
}
