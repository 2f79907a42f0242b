//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Packets the kernel drops, counted by the kernel's own drop reason
 * (enum skb_drop_reason), with rate-limited evidence events.
 *
 * Loaded by agent/probe/drops. tp_btf/kfree_skb fires for real drops only:
 * freeing a packet that was used (consume_skb) has a tracepoint of its own.
 *
 * Restricted to one namespace, the hot path is the namespace filter (three
 * dependent loads), one per-CPU array lookup and one increment: the counters
 * are a per-CPU array of slots indexed by the reason itself, no hash.
 * Counting every namespace, each drop is counted by namespace and reason,
 * so the agent can name who dropped what: in a small direct-mapped table
 * in the same per-CPU value (a slot, once a key has it, is that key's for
 * good), else in a per-CPU hash, else, when that is full, in the array,
 * unsplit. Each drop is counted in exactly one place, so the sum is exact
 * however the reads interleave with drops.
 */
#include "nbs.h"

/* Slots for reasons 0..NBS_DROP_OVERFLOW-1; everything above (a kernel with
 * far more reasons than 6.18's 128, or a subsystem reason, which carries the
 * subsystem in its high 16 bits) lands in the overflow slot, and its evidence
 * events carry the exact value. */
#define NBS_DROP_SLOTS 512
#define NBS_DROP_OVERFLOW (NBS_DROP_SLOTS - 1)

#define NBS_ETH_P_IP 0x0800
#define NBS_ETH_P_IPV6 0x86DD
#define NBS_IPPROTO_TCP 6
#define NBS_IPPROTO_UDP 17
#define NBS_IPPROTO_SCTP 132
#define NBS_IPPROTO_UDPLITE 136

/* Set by the loader before load: constants to the verifier. */
const volatile __u32 target_netns = 0;     /* 0 = every namespace */
const volatile __u32 evidence_per_sec = 0; /* evidence events per second, all CPUs together; 0 = none */
/* Whether the per-CPU (namespace, reason) table is used; tests turn it off
 * to drive the hash behind it. */
const volatile bool netns_table = true;

/* Direct-mapped (namespace, reason) counters per CPU: 4 KiB. */
#define NBS_DROP_CACHE 256

/* key is netns << 32 | (reason slot + 1), 0 while the slot is free; it is
 * written before count, in one 8-byte store, so a reader copying the value
 * word by word never pairs a count with a key it does not belong to. */
struct nbs_drop_cached {
	__u64 key;
	__u64 count;
};

/* Everything a CPU writes, in one per-CPU value so one lookup serves the
 * counters, the evidence accounting and the rate limiter. Only this one
 * program writes it, and the kernel never nests a tracing program inside
 * itself on a CPU, so plain increments are race-free. */
struct nbs_drop_percpu {
	__u64 reason[NBS_DROP_SLOTS]; /* drops by reason; [NBS_DROP_OVERFLOW] = reasons beyond */
	struct nbs_drop_cached cache[NBS_DROP_CACHE]; /* every namespace: by (netns, reason) */
	__u64 suppressed;             /* evidence withheld by the rate limit */
	__u64 ring_full;              /* evidence lost because user space lagged */
	__u64 exhausted_until;        /* time (ns) before which this CPU knows the evidence bucket empty */
	__u64 exhausted_jiffy;        /* jiffies when this CPU last found the budget spent */
};

/* One drop as evidence. Addresses and ports are those of the dropped packet
 * (saddr:sport sent it). family is 0 when the headers were not readable. */
struct nbs_drop_event {
	__u64 ts_ns;    /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 location; /* kernel address of the code that dropped it */
	__u32 netns;
	__u32 reason; /* enum skb_drop_reason, exact even beyond the counter slots */
	__u32 ifindex; /* arrival device (skb_iif), else the device it was on */
	__u16 family;
	__u16 l3proto; /* skb->protocol, host order (ETH_P_*) */
	__u8 l4proto;  /* IPPROTO_* from the IP header */
	__u8 pad;
	__u16 sport;
	__u16 dport;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_drop_percpu);
} drop_percpu SEC(".maps");

/* Drops by namespace and reason (the array's slot), when counting every
 * namespace. netns x ~130 reasons seen in practice: thousands of namespaces
 * with a few reasons each. */
struct nbs_drop_key {
	__u32 netns;
	__u32 reason;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct nbs_drop_key);
	__type(value, __u64);
} drop_netns_counts SEC(".maps");

#define DROP_RING_BYTES (64 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DROP_RING_BYTES);
} drop_events SEC(".maps");

/* The evidence bucket shared by all CPUs (nbs_evidence_allowed). */
__u64 evidence_tat = 0;

/* Keeps struct nbs_drop_event in the object's BTF for bpf2go -type. */
const struct nbs_drop_event *unused_nbs_drop_event __attribute__((unused));

/* Namespace of a dropped packet: the device's, else the receiving socket's
 * (rx_sk), else the owning socket's. A fault on any hop reads as 0, so a
 * device pointer the protocol reused as scratch space (UDP's dev_scratch)
 * falls through to the sockets. */
static __always_inline __u32 drop_netns(const struct sk_buff *skb, const struct sock *rx_sk)
{
	struct net_device *dev = skb->dev;
	__u32 ns = 0;

	if (dev)
		ns = dev->nd_net.net->ns.inum;
	if (!ns && rx_sk)
		ns = nbs_sk_netns(rx_sk);
	if (!ns)
		ns = nbs_sk_netns(skb->sk);
	return ns;
}

/* At most evidence_per_sec events a second over all CPUs, with a burst of
 * as many, from the shared bucket (nbs_evidence_allowed). Within the jiffy
 * (1-10 ms) in which a CPU last found the bucket empty it does not even read
 * the clock, so in a drop storm a suppressed drop costs one load of jiffies
 * and one compare; evidence is then at most a jiffy late after a refill. */
static __always_inline bool evidence_allowed(struct nbs_drop_percpu *pc, __u64 *now)
{
	__u64 jiffy = bpf_jiffies64();

	if (jiffy == pc->exhausted_jiffy)
		return false;
	*now = bpf_ktime_get_ns();
	if (nbs_evidence_allowed(&evidence_tat, &pc->exhausted_until, *now, evidence_per_sec))
		return true;
	pc->exhausted_jiffy = jiffy;
	return false;
}

/* Addresses, ports and protocol of the packet, from its IP header (found at
 * network_header, which the stack sets before anything can drop a packet as
 * IP). Ports are read only for protocols that start with them, at the
 * offset the IP header gives, not at transport_header, which is unset on
 * many drop paths. */
static __always_inline void drop_headers(const struct sk_buff *skb, struct nbs_drop_event *ev)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u32 th;
	__be16 ports[2];
	__u8 first;

	if (ev->l3proto != NBS_ETH_P_IP && ev->l3proto != NBS_ETH_P_IPV6)
		return;
	if (bpf_probe_read_kernel(&first, 1, head + nh))
		return;
	if (first >> 4 == 4 && ev->l3proto == NBS_ETH_P_IP) {
		struct iphdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh))
			return;
		ev->family = NBS_AF_INET;
		ev->l4proto = ip.protocol;
		__builtin_memcpy(ev->saddr, &ip.saddr, 4);
		__builtin_memcpy(ev->daddr, &ip.daddr, 4);
		/* A non-first fragment carries no transport header. */
		if (ip.frag_off & bpf_htons(0x1fff))
			return;
		th = nh + (first & 0xf) * 4;
	} else if (first >> 4 == 6 && ev->l3proto == NBS_ETH_P_IPV6) {
		struct ipv6hdr ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh))
			return;
		ev->family = NBS_AF_INET6;
		ev->l4proto = ip6.nexthdr; /* extension headers are not walked */
		__builtin_memcpy(ev->saddr, &ip6.saddr, 16);
		__builtin_memcpy(ev->daddr, &ip6.daddr, 16);
		th = nh + sizeof(ip6);
	} else {
		return;
	}
	switch (ev->l4proto) {
	case NBS_IPPROTO_TCP:
	case NBS_IPPROTO_UDP:
	case NBS_IPPROTO_SCTP:
	case NBS_IPPROTO_UDPLITE:
		break;
	default:
		return;
	}
	if (bpf_probe_read_kernel(ports, sizeof(ports), head + th))
		return;
	ev->sport = bpf_ntohs(ports[0]);
	ev->dport = bpf_ntohs(ports[1]);
}

static __always_inline void drop_evidence(struct nbs_drop_percpu *pc, const struct sk_buff *skb,
					  const struct sock *rx_sk, void *location, __u32 reason,
					  __u32 netns)
{
	struct nbs_drop_event *ev;
	struct net_device *dev;
	__u64 now = 0;

	if (!evidence_allowed(pc, &now)) {
		pc->suppressed++;
		return;
	}
	ev = bpf_ringbuf_reserve(&drop_events, sizeof(*ev), 0);
	if (!ev) {
		pc->ring_full++;
		return;
	}
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->ts_ns = now;
	ev->location = (__u64)location;
	ev->netns = netns;
	ev->reason = reason;
	ev->ifindex = skb->skb_iif;
	if (!ev->ifindex) {
		dev = skb->dev;
		if (dev)
			ev->ifindex = dev->ifindex;
	}
	ev->l3proto = bpf_ntohs(skb->protocol);
	drop_headers(skb, ev);
	bpf_ringbuf_submit(ev, nbs_evidence_submit_flags(&drop_events, DROP_RING_BYTES, sizeof(*ev), evidence_per_sec));
}

/* Count a drop by namespace and reason: in this CPU's slot for the key if
 * it has one or can take a free one, else in the hash. False when both are
 * full. */
static __always_inline bool count_netns(struct nbs_drop_percpu *pc, __u32 netns, __u32 slot)
{
	__u64 key = ((__u64)netns << 32) | (slot + 1);
	__u32 i = (netns * 2654435761u) ^ (slot * 40503u);
	struct nbs_drop_cached *c;
	struct nbs_drop_key k;

	i = (i >> 8) & (NBS_DROP_CACHE - 1);
	c = &pc->cache[i];
	if (netns_table && c->key == key) {
		c->count++;
		return true;
	}
	if (netns_table && !c->key) {
		*(volatile __u64 *)&c->key = key;
		barrier();
		*(volatile __u64 *)&c->count = 1;
		return true;
	}
	k.netns = netns;
	k.reason = slot;
	return nbs_percpu_inc(&drop_netns_counts, &k);
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(nbs_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason,
	     struct sock *rx_sk)
{
	struct nbs_drop_percpu *pc;
	__u32 zero = 0, netns = 0, slot = reason;
	bool split = false;

	netns = drop_netns(skb, rx_sk);
	if (target_netns && netns != target_netns)
		return 0;
	pc = bpf_map_lookup_elem(&drop_percpu, &zero);
	if (!pc)
		return 0;
	if (slot >= NBS_DROP_OVERFLOW)
		slot = NBS_DROP_OVERFLOW;
	if (!target_netns)
		split = count_netns(pc, netns, slot);
	if (!split) {
		/* Keep the compiler from folding the clamp into a form the
		 * verifier cannot bound; the mask is a no-op after the clamp. */
		barrier_var(slot);
		pc->reason[slot & (NBS_DROP_SLOTS - 1)]++;
	}
	if (evidence_per_sec)
		drop_evidence(pc, skb, rx_sk, location, reason, netns);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
