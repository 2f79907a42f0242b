//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * DNS as this host's clients see it: queries over UDP sent by local
 * sockets, matched to their responses by (netns, 5-tuple, DNS id) in a
 * bounded LRU hash; latency measured in the kernel between the query
 * leaving the namespace's device and its response arriving on one; counts
 * by (netns, server, rcode); rate-limited evidence of slow and failed
 * answers naming the query.
 *
 * Loaded by agent/probe/dns. Two tp_btf programs, the only tracing type
 * that attaches on our kernels (docs/kernel.md, "Attach points"):
 * net_dev_queue sees every packet a device is asked to send (queries go
 * out there), netif_receive_skb every packet a device hands the stack
 * (responses come in there). Both run for every packet of the host, so the
 * first tests (a UDP socket's, then port 53) are the cheap ones, and the
 * namespace is looked at only for DNS.
 *
 * Only queries from local sockets (skb->sk set at the device) are tracked:
 * a pod's query forwarded by the host leaves the host's device without a
 * socket, and is the pod's, already counted in the pod's namespace.
 * Timeouts are counted by user space, which deletes pending queries older
 * than its timeout; a response and the sweep race for the entry through
 * bpf_map_delete_elem, so each query ends exactly once: answered or timed
 * out.
 */
#include "nbs.h"
#include "loglinear.h"

/* libbpf-dev 1.1 has no bpf_core_cast (docs/kernel.md). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

#define NBS_ETH_P_IP 0x0800
#define NBS_ETH_P_IPV6 0x86DD
#define NBS_IPPROTO_UDP 17
#define NBS_DNS_PORT 53
#define NBS_DNS_QR 0x8000
/* Longest query name kept, in wire format (length-prefixed labels): 96
 * bytes hold any name of a cluster ("cart.shop.svc.cluster.local" is 29);
 * a longer one is cut and marked so. */
#define NBS_DNS_NAME 96

/* Set by the loader before load. */
const volatile __u32 target_netns = 0;     /* 0 = every namespace */
const volatile __u32 evidence_per_sec = 0; /* evidence events per second, all CPUs together; 0 = none */
const volatile __u64 slow_ns = 0;          /* answers at least this slow are evidence; 0 = none */

/* A query as the client sent it: client = this host's socket. */
struct nbs_dns_key {
	__u8 client[16];
	__u8 server[16];
	__u32 netns;
	__u16 client_port;
	__u16 server_port;
	__u16 id;     /* DNS message id */
	__u16 family;
};

struct nbs_dns_pending {
	__u64 ts_ns; /* first sent (a retry with the same id keeps it) */
	__u16 qtype;
	__u8 name_len; /* bytes of name read */
	__u8 pad[5];
	__u8 name[NBS_DNS_NAME];
};

/* Counter keys: what = NBS_DNS_QUERY, or NBS_DNS_ANSWER with an error rcode. */
enum nbs_dns_what {
	NBS_DNS_QUERY = 1,
	NBS_DNS_ANSWER = 2,
};

struct nbs_dns_count_key {
	__u8 server[16];
	__u32 netns;
	__u16 family;
	__u8 what;
	__u8 rcode;
};

struct nbs_dns_event {
	__u64 ts_ns; /* bpf_ktime_get_ns() of the answer */
	__u64 latency_ns;
	__u8 client[16];
	__u8 server[16];
	__u32 netns;
	__u16 client_port;
	__u16 server_port;
	__u16 family;
	__u16 id;
	__u16 qtype;
	__u8 rcode;
	__u8 name_len;
	__u8 name[NBS_DNS_NAME];
};

/* Per-CPU counts of the programs' own work and losses. */
struct nbs_dns_stats {
	__u64 queries;     /* query packets tracked */
	__u64 answers;     /* responses matched to a pending query */
	__u64 unmatched;   /* responses with no pending query (late, or not ours) */
	__u64 pending_full; /* queries not tracked: the pending map refused them */
	__u64 count_errors; /* counter updates that failed (map full) */
	__u64 nonlinear;   /* port-53 packets whose DNS header was not readable */
	__u64 suppressed;  /* evidence withheld by the rate limit */
	__u64 ring_full;   /* evidence lost because user space lagged */
	__u64 denied_until; /* time (ns) before which this CPU knows the evidence bucket empty */
	/* With target_netns only: each program's runs in that namespace, so
	 * the agent charges the source for its own work, not every packet of
	 * the host (run-time statistics count every run). */
	__u64 runs_query;
	__u64 runs_answer;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	/* Outstanding queries: answered ones are deleted at once, the rest by
	 * user space's sweep after its timeout. 16,384 is 3,000 unanswered
	 * queries a second for a 5 s timeout. */
	__uint(max_entries, 16384);
	__type(key, struct nbs_dns_key);
	__type(value, struct nbs_dns_pending);
} dns_pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	/* netns x server x (query + 16 rcodes) */
	__uint(max_entries, 16384);
	__type(key, struct nbs_dns_count_key);
	__type(value, __u64);
} dns_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_hist);
} dns_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_dns_stats);
} dns_stats SEC(".maps");

#define DNS_RING_BYTES (256 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DNS_RING_BYTES);
} dns_events SEC(".maps");

/* The evidence bucket shared by all CPUs (nbs_evidence_allowed). */
__u64 evidence_tat = 0;

/* Keeps the record types in the object's BTF for bpf2go -type. */
const struct nbs_dns_event *unused_nbs_dns_event __attribute__((unused));

/* The IP and UDP headers of a packet and where its DNS header starts. */
struct nbs_dns_pkt {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u16 payload; /* UDP payload bytes */
	unsigned char *dns;
};

/*
 * Parse the packet whose IP header is at l3: true for a UDP datagram to or
 * from port 53 (IPv4, or IPv6 without extension headers), with its DNS
 * header in the skb's linear data. One read covers IP and UDP headers for
 * the common shapes, so a packet of another protocol costs one read.
 */
enum nbs_dns_parsed {
	NBS_DNS_OTHER = 0,  /* not a DNS datagram: the common case, left at once */
	NBS_DNS_OK = 1,
	NBS_DNS_UNREADABLE = 2, /* port 53, but the DNS header is not in linear data */
};

static __always_inline int parse(const struct sk_buff *skb, unsigned char *l3, struct nbs_dns_pkt *p)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	const struct udphdr *udp;

	/* Headers are read with direct loads through bpf_rdonly_cast (the
	 * verifier makes them fault-tolerant loads, and the cast itself no
	 * instruction): a packet that is not DNS costs no helper call. */
	if (proto == NBS_ETH_P_IP) {
		const struct iphdr *ip = bpf_rdonly_cast(l3, bpf_core_type_id_kernel(struct iphdr));
		__u32 ihl;

		if (ip->protocol != NBS_IPPROTO_UDP)
			return NBS_DNS_OTHER;
		if (ip->frag_off & bpf_htons(0x1fff)) /* a later fragment: no UDP header */
			return NBS_DNS_OTHER;
		ihl = BPF_CORE_READ_BITFIELD(ip, ihl);
		if (ihl < 5)
			return NBS_DNS_OTHER;
		udp = bpf_rdonly_cast(l3 + ihl * 4, bpf_core_type_id_kernel(struct udphdr));
		if (udp->source != bpf_htons(NBS_DNS_PORT) && udp->dest != bpf_htons(NBS_DNS_PORT))
			return NBS_DNS_OTHER;
		__builtin_memset(p->src, 0, 16);
		__builtin_memset(p->dst, 0, 16);
		*(__u32 *)p->src = ip->saddr;
		*(__u32 *)p->dst = ip->daddr;
		p->family = NBS_AF_INET;
	} else if (proto == NBS_ETH_P_IPV6) {
		const struct ipv6hdr *ip6 = bpf_rdonly_cast(l3, bpf_core_type_id_kernel(struct ipv6hdr));

		if (ip6->nexthdr != NBS_IPPROTO_UDP)
			return NBS_DNS_OTHER;
		udp = bpf_rdonly_cast(l3 + sizeof(struct ipv6hdr), bpf_core_type_id_kernel(struct udphdr));
		if (udp->source != bpf_htons(NBS_DNS_PORT) && udp->dest != bpf_htons(NBS_DNS_PORT))
			return NBS_DNS_OTHER;
		if (bpf_probe_read_kernel(p->src, 16, &ip6->saddr) || bpf_probe_read_kernel(p->dst, 16, &ip6->daddr))
			return NBS_DNS_OTHER;
		p->family = NBS_AF_INET6;
	} else {
		return NBS_DNS_OTHER;
	}
	p->sport = bpf_ntohs(udp->source);
	p->dport = bpf_ntohs(udp->dest);
	p->payload = bpf_ntohs(udp->len) - sizeof(struct udphdr);
	p->dns = (unsigned char *)udp + sizeof(struct udphdr);
	/* The DNS header must be in the linear data (it is for every datagram
	 * a socket sends, and for what drivers and veth receive); a header in
	 * page fragments is counted, not guessed at. */
	if (p->payload < 12 || p->payload > 65507 || p->dns + 12 > skb->head + skb->tail)
		return NBS_DNS_UNREADABLE;
	return NBS_DNS_OK;
}

/* The stats, after parse: only DNS datagrams pay for the lookup. */
static __always_inline struct nbs_dns_stats *parsed(int r)
{
	__u32 zero = 0;
	struct nbs_dns_stats *st;

	if (r == NBS_DNS_OTHER)
		return NULL;
	st = bpf_map_lookup_elem(&dns_stats, &zero);
	if (st && r == NBS_DNS_UNREADABLE) {
		st->nonlinear++;
		return NULL;
	}
	return st;
}

/* With target_netns: whether skb is of that namespace (*netns set), the
 * run counted as in scope; without, always true and *netns left for the
 * caller. */
static __always_inline bool in_scope(const struct sk_buff *skb, __u32 *netns, int answer)
{
	struct nbs_dns_stats *st;
	__u32 zero = 0;

	if (!target_netns)
		return true;
	*netns = nbs_skb_netns(skb);
	if (*netns != target_netns)
		return false;
	st = bpf_map_lookup_elem(&dns_stats, &zero);
	if (st) {
		if (answer)
			st->runs_answer++;
		else
			st->runs_query++;
	}
	return true;
}

static __always_inline void count(struct nbs_dns_stats *st, const __u8 *server, __u32 netns, __u16 family,
				  __u8 what, __u8 rcode)
{
	struct nbs_dns_count_key k = {.netns = netns, .family = family, .what = what, .rcode = rcode};

	__builtin_memcpy(k.server, server, 16);
	if (!nbs_percpu_inc(&dns_counts, &k))
		st->count_errors++;
}

/* The question's name (wire format) and type, from the DNS message at
 * dns (payload bytes): bounded reads within the skb's linear data (end),
 * a name cut at NBS_DNS_NAME bytes. */
static __always_inline void question(unsigned char *dns, __u16 payload, unsigned char *end, __u8 *name,
				     __u8 *name_len, __u16 *qtype)
{
	long avail = end - (dns + 12);
	__u32 n = payload - 12;
	__be16 qt = 0;

	*name_len = 0;
	if (avail <= 0)
		return;
	if (avail < n) /* the rest is in page fragments: keep what is linear */
		n = avail;
	if (n > NBS_DNS_NAME)
		n = NBS_DNS_NAME;
	/* Keep the compiler from folding the bound into the clamps above,
	 * where the verifier would not see it. */
	barrier_var(n);
	if (n == 0 || n > NBS_DNS_NAME || bpf_probe_read_kernel(name, n, dns + 12))
		return;
	*name_len = n;
	/* The type follows the name's terminating zero label; find it. */
	for (__u32 i = 0, hops = 0; hops < 32; hops++) {
		__u8 l;

		if (i >= n || i >= NBS_DNS_NAME)
			break;
		l = name[i];
		if (l == 0) {
			if (i + 3 <= n)
				bpf_probe_read_kernel(&qt, 2, dns + 12 + i + 1);
			break;
		}
		i += l + 1;
	}
	*qtype = bpf_ntohs(qt);
}

/* A query leaving a local socket through a device. */
SEC("tp_btf/net_dev_queue")
int BPF_PROG(nbs_dns_query, struct sk_buff *skb)
{
	struct nbs_dns_pending pend = {};
	struct nbs_dns_key k = {};
	struct sock *sk;
	struct nbs_dns_stats *st;
	struct nbs_dns_pkt p;
	__be16 hdr[2];
	__u32 netns = 0;

	/* Counting one namespace, its test comes first, so the runs in scope
	 * can be counted (dns_stats); counting every one, it is left for
	 * DNS packets only. */
	if (!in_scope(skb, &netns, 0))
		return 0;
	sk = skb->sk;
	/* Direct loads: a packet of no socket (forwarded) or of a socket
	 * other than UDP leaves without a helper call. */
	if (!sk || sk->sk_protocol != NBS_IPPROTO_UDP)
		return 0;
	st = parsed(parse(skb, skb->head + skb->network_header, &p));
	if (!st || p.dport != NBS_DNS_PORT)
		return 0;
	if (!target_netns)
		netns = nbs_skb_netns(skb);
	if (bpf_probe_read_kernel(hdr, sizeof(hdr), p.dns))
		return 0;
	if (bpf_ntohs(hdr[1]) & NBS_DNS_QR)
		return 0; /* a response a local server sends */
	__builtin_memcpy(k.client, p.src, 16);
	__builtin_memcpy(k.server, p.dst, 16);
	k.netns = netns;
	k.client_port = p.sport;
	k.server_port = p.dport;
	k.id = bpf_ntohs(hdr[0]);
	k.family = p.family;
	st->queries++;
	count(st, p.dst, netns, p.family, NBS_DNS_QUERY, 0);
	pend.ts_ns = bpf_ktime_get_ns();
	question(p.dns, p.payload, skb->head + skb->tail, pend.name, &pend.name_len, &pend.qtype);
	/* A retry with the same id and port keeps the first send's time: the
	 * latency the client waited. */
	if (bpf_map_update_elem(&dns_pending, &k, &pend, BPF_NOEXIST) && !bpf_map_lookup_elem(&dns_pending, &k))
		st->pending_full++;
	return 0;
}

/* Reserve an evidence record for the answer to q, if the budget allows;
 * NULL otherwise (accounted for). */
static __always_inline struct nbs_dns_event *evidence(struct nbs_dns_stats *st, const struct nbs_dns_key *k,
						      const struct nbs_dns_pending *q, __u64 now, __u64 latency,
						      __u8 rcode)
{
	struct nbs_dns_event *ev;

	if (!nbs_evidence_allowed(&evidence_tat, &st->denied_until, now, evidence_per_sec)) {
		__sync_fetch_and_add(&st->suppressed, 1);
		return NULL;
	}
	ev = bpf_ringbuf_reserve(&dns_events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&st->ring_full, 1);
		return NULL;
	}
	ev->ts_ns = now;
	ev->latency_ns = latency;
	__builtin_memcpy(ev->client, k->client, 16);
	__builtin_memcpy(ev->server, k->server, 16);
	ev->netns = k->netns;
	ev->client_port = k->client_port;
	ev->server_port = k->server_port;
	ev->family = k->family;
	ev->id = k->id;
	ev->qtype = q->qtype;
	ev->rcode = rcode;
	ev->name_len = q->name_len;
	__builtin_memcpy(ev->name, q->name, NBS_DNS_NAME);
	return ev;
}

/* A response arriving for a pending query. At netif_receive_skb the
 * skb's data is its network header (the device pulled the link header;
 * network_header is set only after the tracepoint). */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(nbs_dns_answer, struct sk_buff *skb)
{
	struct nbs_dns_event *ev = NULL;
	struct nbs_dns_pending *q;
	struct nbs_dns_key k = {};
	struct nbs_dns_stats *st;
	struct nbs_dns_pkt p;
	struct nbs_hist *h;
	__be16 hdr[2];
	__u64 now, lat;
	__u32 netns = 0, zero = 0;
	__u8 rcode;

	if (!in_scope(skb, &netns, 1))
		return 0;
	st = parsed(parse(skb, skb->data, &p));
	if (!st || p.sport != NBS_DNS_PORT)
		return 0;
	if (!target_netns)
		netns = nbs_skb_netns(skb);
	if (bpf_probe_read_kernel(hdr, sizeof(hdr), p.dns))
		return 0;
	if (!(bpf_ntohs(hdr[1]) & NBS_DNS_QR))
		return 0; /* a query to a local server */
	__builtin_memcpy(k.client, p.dst, 16);
	__builtin_memcpy(k.server, p.src, 16);
	k.netns = netns;
	k.client_port = p.dport;
	k.server_port = p.sport;
	k.id = bpf_ntohs(hdr[0]);
	k.family = p.family;
	q = bpf_map_lookup_elem(&dns_pending, &k);
	if (!q) {
		st->unmatched++;
		return 0;
	}
	now = bpf_ktime_get_ns();
	lat = now > q->ts_ns ? now - q->ts_ns : 0;
	rcode = bpf_ntohs(hdr[1]) & 0xf;
	/* Evidence is taken from the entry before it is deleted. */
	if (rcode != 0 || (slow_ns && lat >= slow_ns))
		ev = evidence(st, &k, q, now, lat, rcode);
	/* Whoever deletes the entry ends the query: this answer, or user
	 * space's sweep of timed-out ones. */
	if (bpf_map_delete_elem(&dns_pending, &k)) {
		if (ev)
			bpf_ringbuf_discard(ev, 0);
		st->unmatched++;
		return 0;
	}
	st->answers++;
	/* NOERROR answers are counted by the histogram only: a key per
	 * namespace less in the counter map. */
	if (rcode)
		count(st, k.server, netns, p.family, NBS_DNS_ANSWER, rcode);
	h = bpf_map_lookup_elem(&dns_hist, &zero);
	if (h)
		nbs_hist_record(h, lat);
	if (ev)
		bpf_ringbuf_submit(ev, nbs_evidence_submit_flags(&dns_events, DNS_RING_BYTES, sizeof(*ev), evidence_per_sec));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
