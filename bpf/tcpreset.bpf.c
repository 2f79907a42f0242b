//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * TCP resets, sent (by enum sk_rst_reason) and received (by socket state),
 * counted per network namespace, with rate-limited evidence events.
 *
 * Loaded by agent/probe/tcpreset. Both programs are tp_btf, the only tracing
 * attach type that loads on our kernels (docs/kernel.md, "Attach points").
 */
#include "nbs.h"

/* Set by the loader before load (they are constants to the verifier, so the
 * untaken branches are pruned). */
const volatile __u32 target_netns = 0;     /* 0 = every namespace */
const volatile __u32 evidence_per_sec = 0; /* evidence events per second, all CPUs together; 0 = none */

enum nbs_rst_direction {
	NBS_RST_SENT = 1,
	NBS_RST_RECEIVED = 2,
};

struct nbs_rst_key {
	__u32 netns;
	__u32 direction; /* enum nbs_rst_direction */
	__u32 code;      /* sk_rst_reason when sent, socket state when received */
};

/* One evidence record. Addresses and ports are those of the RST packet
 * itself: saddr:sport sent it, daddr:dport is where it went. */
struct nbs_rst_event {
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 netns;
	__u32 reason; /* sk_rst_reason; 0 for received resets (the kernel gives none) */
	__u8 direction;
	__u8 state; /* socket state; 0 when the kernel had no socket (NO_SOCKET) */
	__u16 family;
	__u16 sport;
	__u16 dport;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* Per-CPU bookkeeping of agents before the per-CPU slots (rst_percpu):
 * the programs no longer write it, but a pinned one adopted after an
 * upgrade holds what those agents counted, which user space adds in. */
struct nbs_rst_stats {
	__u64 suppressed;    /* evidence withheld by the rate limit */
	__u64 ring_full;     /* evidence lost because user space lagged */
	__u64 count_errors;  /* counter updates that failed (map full) */
	__u64 denied_until;  /* unused */
};

/* Slots per direction for codes 0..NBS_RST_CODES-1 (6.18 has ~40 reasons
 * and 12 TCP states); a code beyond is counted in the hash, exactly. */
#define NBS_RST_CODES 64
/* Direct-mapped (namespace, code) counters per CPU and direction. */
#define NBS_RST_CACHE 64

/* key is netns << 32 | (code + 1), 0 while the slot is free; written
 * before count, in one 8-byte store (see drops.bpf.c). */
struct nbs_rst_cached {
	__u64 key;
	__u64 count;
};

/*
 * Everything a CPU writes for a reset, in one per-CPU array value, so a
 * reset costs one array lookup and no hash: at a rare rate (10 a second)
 * a per-CPU hash's lookup is all cache misses, ~1.5 µs a reset here
 * (BENCHMARKS.md, "Evidence cost per event"). Counting one namespace, a
 * reset is counted in count[direction - 1][code]; counting every namespace,
 * in this CPU's direct-mapped slot for (netns, code) if it has or can take
 * one, else in the hash (rst_counts). Each slot of count and cache is
 * written by one program only (each has its direction) and the kernel does
 * not nest a tracing program inside itself on a CPU, so plain increments
 * are race-free; the fields both programs write are updated atomically.
 */
struct nbs_rst_percpu {
	/* First, so that with the common low codes' slots they share the
	 * value's first cache line: at a rare rate every line is a miss. */
	__u64 suppressed;    /* evidence withheld by the rate limit */
	__u64 ring_full;     /* evidence lost because user space lagged */
	__u64 count_errors;  /* counter updates that failed (map full) */
	__u64 denied_until;  /* time (ns) before which this CPU knows the evidence bucket empty */
	__u64 count[2][NBS_RST_CODES];
	struct nbs_rst_cached cache[2][NBS_RST_CACHE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	/* netns x direction x code: ~40 codes, so room for hundreds of
	 * namespaces even when counting every one of them. */
	__uint(max_entries, 16384);
	__type(key, struct nbs_rst_key);
	__type(value, __u64);
} rst_counts SEC(".maps");

/* What agents before rst_cpus counted, per CPU: the programs no longer
 * write it, but a pinned one adopted after an upgrade holds their counts,
 * which user space adds in. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_rst_percpu);
} rst_percpu SEC(".maps");

/* One CPU's slots, a whole number of cache lines, so no two CPUs write
 * one line. */
struct nbs_rst_cpu {
	struct nbs_rst_percpu c;
	__u8 pad[64 - sizeof(struct nbs_rst_percpu) % 64];
};

/*
 * This CPU's slots, indexed by the CPU (the loader sets max_entries to the
 * possible CPUs; the program runs with migration disabled, and the fields
 * both programs write are updated atomically, as in a per-CPU value). A
 * plain array, not a per-CPU one: the verifier turns the lookup into
 * arithmetic on constants, where a per-CPU array's loads its pointer table
 * from the map first. At a rare rate that load is a cache miss of its own,
 * in a row before the value's (BENCHMARKS.md, "Evidence cost per event").
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_rst_cpu);
} rst_cpus SEC(".maps");

#define RST_RING_BYTES (256 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RST_RING_BYTES);
} rst_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_rst_stats);
} rst_stats SEC(".maps");

/*
 * The evidence bucket shared by all CPUs (nbs_evidence_allowed), alone in
 * its line. In a map of its own rather than a global: globals live in .bss,
 * a mmapable map the kernel puts in vmalloc'd 4 KiB pages, so at a rare
 * rate the bucket's line came with a TLB miss of its own (a page walk in a
 * row before the line). A small plain array is kmalloc'd, in the kernel's
 * direct map like the socket and packet every reset reads: per rare reset
 * 0.89-0.97x the time of the same program with the .bss bucket, round by
 * round in one run (0.72-1.03x in another), both reloaded every round
 * (bench/evidencecost; BENCHMARKS.md, "Evidence cost per event").
 */
struct nbs_rst_bucket {
	__u64 tat;
	__u64 pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_rst_bucket);
} rst_bucket SEC(".maps");

/* Set by the loader before load: the per-CPU direct-mapped table is used
 * (tests turn it off to drive the hash behind it). */
const volatile bool netns_table = true;

/* Keeps struct nbs_rst_event in the object's BTF for bpf2go -type. */
const struct nbs_rst_event *unused_nbs_rst_event __attribute__((unused));

static __always_inline struct nbs_rst_percpu *percpu(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct nbs_rst_cpu *v = bpf_map_lookup_elem(&rst_cpus, &cpu);

	return v ? &v->c : NULL;
}

/*
 * This CPU's slots, looked up first and their first line and the evidence
 * bucket's read at once, before the namespace: at a rare rate each is a
 * cache miss (the lookup's two, the map and then the value, in a row), and
 * issued here they overlap the namespace's own chain of misses (socket or
 * device, then the namespace) instead of following it. A reset of another
 * namespace pays the lookup; resets are not per packet. *tat is the
 * bucket's word (both lookups are arithmetic on constants: plain arrays).
 */
static __always_inline struct nbs_rst_percpu *early(__u64 **tat)
{
	struct nbs_rst_percpu *pc = percpu();
	__u32 zero = 0;
	struct nbs_rst_bucket *b = bpf_map_lookup_elem(&rst_bucket, &zero);

	if (!pc || !b)
		return NULL;
	*tat = &b->tat;
	(void)*(volatile __u64 *)&pc->denied_until;
	if (evidence_per_sec)
		(void)*(volatile __u64 *)&b->tat;
	return pc;
}

/* Count a reset in the hash (rst_counts): a code beyond the slots, or a
 * namespace without a slot of its own. Not inlined: its code (and its key
 * on the stack) stays out of the lines a common reset runs through. */
static __noinline void count_hash(struct nbs_rst_percpu *pc, __u32 netns, __u32 direction, __u32 code)
{
	struct nbs_rst_key k = {.netns = netns, .direction = direction, .code = code};

	if (!nbs_percpu_inc(&rst_counts, &k))
		__sync_fetch_and_add(&pc->count_errors, 1);
}

/* Count one reset, in one place only (see struct nbs_rst_percpu). */
static __always_inline void count(struct nbs_rst_percpu *pc, __u32 netns, __u32 direction, __u32 code)
{
	__u32 d = (direction - 1) & 1;

	if (target_netns) {
		if (code < NBS_RST_CODES) {
			pc->count[d][code & (NBS_RST_CODES - 1)]++;
			return;
		}
	} else if (netns_table && code < NBS_RST_CODES) {
		__u64 key = ((__u64)netns << 32) | (code + 1);
		__u32 i = ((netns * 2654435761u) ^ (code * 40503u)) >> 8;
		struct nbs_rst_cached *c = &pc->cache[d][i & (NBS_RST_CACHE - 1)];

		if (c->key == key) {
			c->count++;
			return;
		}
		if (!c->key) {
			*(volatile __u64 *)&c->key = key;
			barrier();
			*(volatile __u64 *)&c->count = 1;
			return;
		}
	}
	count_hash(pc, netns, direction, code);
}

/*
 * The RST's ends, written straight into the record: no tuple on the stack
 * copied over, no swap (the peer's shape, bench/evidencecost evpeer.bpf.c,
 * does both): 1535 B of jited code where it was 1661. Per rare reset
 * 0.90-1.05x the program that copied a stack tuple (median 0.99x over 10
 * rounds in two runs, each reloaded 5 times a round): within the noise,
 * less work all the same (bench/evidencecost). saddr:sport sent the RST. For a socket's reset local_sent says
 * whether its local end sent it (a sent reset) or received it.
 */
static __always_inline void ends_of_sock(struct nbs_rst_event *ev, const struct sock *sk, bool local_sent)
{
	const struct sock_common *c = &sk->__sk_common;
	__u16 family = c->skc_family;
	__u16 lport, rport = bpf_ntohs(c->skc_dport);
	__u8 *l = local_sent ? ev->saddr : ev->daddr;
	__u8 *r = local_sent ? ev->daddr : ev->saddr;

	/* As nbs_sk_tuple: skc_num is zeroed when a full socket releases its
	 * port on the way to CLOSE, when most resets are sent. */
	if (nbs_sk_fullsock(sk))
		lport = bpf_ntohs(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
	else
		lport = c->skc_num;
	ev->family = family;
	ev->sport = local_sent ? lport : rport;
	ev->dport = local_sent ? rport : lport;
	if (family == NBS_AF_INET6) {
		bpf_probe_read_kernel(l, 16, &c->skc_v6_rcv_saddr);
		bpf_probe_read_kernel(r, 16, &c->skc_v6_daddr);
	} else {
		__builtin_memset(ev->saddr, 0, 16);
		__builtin_memset(ev->daddr, 0, 16);
		*(__u32 *)l = c->skc_rcv_saddr;
		*(__u32 *)r = c->skc_daddr;
	}
}

/* No ends known: the zero AddrPort on both. */
static __always_inline void no_ends(struct nbs_rst_event *ev)
{
	ev->family = 0;
	ev->sport = 0;
	ev->dport = 0;
	__builtin_memset(ev->saddr, 0, 16);
	__builtin_memset(ev->daddr, 0, 16);
}

/* The ends of a reset answering skb (NO_SOCKET): the packet's source is
 * where the RST goes. Its headers as in nbs_skb_tuple; none when they
 * cannot be read. */
static __always_inline void ends_of_packet(struct nbs_rst_event *ev, const struct sk_buff *skb)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u16 th = skb->transport_header;
	__be16 ports[2];
	__u8 ver;

	if (bpf_probe_read_kernel(&ver, 1, head + nh))
		goto none;
	ver >>= 4;
	if (ver == 4) {
		__be32 addrs[2]; /* saddr, daddr: iphdr's last 8 bytes */

		if (bpf_probe_read_kernel(addrs, sizeof(addrs), head + nh + offsetof(struct iphdr, saddr)))
			goto none;
		ev->family = NBS_AF_INET;
		__builtin_memset(ev->saddr, 0, 16);
		__builtin_memset(ev->daddr, 0, 16);
		*(__u32 *)ev->saddr = addrs[1];
		*(__u32 *)ev->daddr = addrs[0];
	} else if (ver == 6) {
		if (bpf_probe_read_kernel(ev->saddr, 16, head + nh + offsetof(struct ipv6hdr, daddr)) ||
		    bpf_probe_read_kernel(ev->daddr, 16, head + nh + offsetof(struct ipv6hdr, saddr)))
			goto none;
		ev->family = NBS_AF_INET6;
	} else {
		goto none;
	}
	/* source and dest are the first two fields of both tcphdr and udphdr */
	if (bpf_probe_read_kernel(ports, sizeof(ports), head + th))
		goto none;
	ev->sport = bpf_ntohs(ports[1]);
	ev->dport = bpf_ntohs(ports[0]);
	return;
none:
	no_ends(ev);
}

/*
 * Emit one evidence event if the budget allows; account for it otherwise.
 * now is the program's first act (see nbs_rst_send). The record is reserved
 * before the ends are read: at a rare rate the ring's lines (its lock, its
 * positions, the record's) are cold, and the reads of lines the kernel
 * just used then follow them instead of preceding them. With the clock's
 * place (nbs_rst_send): 1.01-1.13x and 1.09-1.19x the peer per rare reset
 * where it was 1.43-1.51x and 1.24-1.43x, in back-to-back runs
 * (BENCHMARKS.md, "Evidence cost per event").
 */
static __always_inline void evidence(struct nbs_rst_percpu *st, __u64 *tat, const struct sock *sk,
				     const struct sk_buff *skb, __u32 netns, __u8 direction, __u32 reason,
				     __u64 now)
{
	struct nbs_rst_event *ev;

	if (!nbs_evidence_allowed(tat, &st->denied_until, now, evidence_per_sec)) {
		__sync_fetch_and_add(&st->suppressed, 1);
		return;
	}

	ev = bpf_ringbuf_reserve(&rst_events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&st->ring_full, 1);
		return;
	}
	if (sk)
		ends_of_sock(ev, sk, direction == NBS_RST_SENT);
	else if (skb)
		ends_of_packet(ev, skb);
	else
		no_ends(ev);
	ev->ts_ns = now;
	ev->netns = netns;
	ev->reason = reason;
	ev->direction = direction;
	ev->state = sk ? sk->__sk_common.skc_state : 0;
	bpf_ringbuf_submit(ev, nbs_evidence_submit_flags(&rst_events, RST_RING_BYTES, sizeof(*ev), evidence_per_sec));
}

/* sk is NULL when no socket matched the packet (NO_SOCKET); skb is NULL for
 * resets a socket sends on its own (abort on close, linger, ...). */
SEC("tp_btf/tcp_send_reset")
int BPF_PROG(nbs_rst_send, const struct sock *sk, const struct sk_buff *skb,
	     enum sk_rst_reason reason)
{
	struct nbs_rst_percpu *pc;
	__u64 now, *tat;
	__u32 netns;

	/* The clock first: on x86 it reads the TSC behind an LFENCE, which
	 * waits for every load in flight. Read after early() it waited for
	 * the cold lines early() asks for, undoing their overlap with the
	 * namespace's; read first, nothing is in flight yet. A reset of
	 * another namespace pays the read. */
	now = bpf_ktime_get_ns();
	pc = early(&tat);
	if (!pc)
		return 0;
	netns = sk ? nbs_sk_netns(sk) : nbs_skb_netns(skb);
	if (target_netns && netns != target_netns)
		return 0;
	count(pc, netns, NBS_RST_SENT, reason);
	evidence(pc, tat, sk, skb, netns, NBS_RST_SENT, reason, now);
	return 0;
}

/* The kernel passes no reason for a received reset; the state the socket
 * was in tells what the reset interrupted (connect, established, close). */
SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(nbs_rst_recv, struct sock *sk)
{
	struct nbs_rst_percpu *pc;
	__u64 now, *tat;
	__u32 netns;

	if (!sk)
		return 0;
	now = bpf_ktime_get_ns(); /* first, as in nbs_rst_send */
	pc = early(&tat);
	if (!pc)
		return 0;
	netns = nbs_sk_netns(sk);
	if (target_netns && netns != target_netns)
		return 0;
	count(pc, netns, NBS_RST_RECEIVED, sk->__sk_common.skc_state);
	evidence(pc, tat, sk, NULL, netns, NBS_RST_RECEIVED, 0, now);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
