/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers for the NBS BPF programs.
 *
 * The helpers that take `struct sock *` / `struct sk_buff *` expect BTF-typed
 * pointers as handed to tp_btf (BPF_PROG_TYPE_TRACING) programs, the only
 * tracing attach type that works on our target kernels (docs/kernel.md,
 * "Attach points"). They use direct loads, which the verifier turns into
 * fault-tolerant PROBE_MEM loads with CO-RE field offsets: one instruction
 * each instead of a bpf_probe_read_kernel() call per hop (hot paths).
 * Raw memory that is not BTF-typed (packet headers behind skb->head) is read
 * with bpf_probe_read_kernel().
 */
#pragma once

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

/* vmlinux.h carries types, not macros. These values are uapi. */
#define NBS_AF_INET 2
#define NBS_AF_INET6 10
#define NBS_NSEC_PER_SEC 1000000000ULL

/* Network-namespace inode (what `stat /run/netns/X` shows) of a socket of any
 * kind: full, request or timewait — skc_net lives in the shared sock_common.
 * 0 when sk is NULL. */
static __always_inline __u32 nbs_sk_netns(const struct sock *sk)
{
	if (!sk)
		return 0;
	return sk->__sk_common.skc_net.net->ns.inum;
}

/* Network-namespace inode of an skb: the device it arrived on / leaves by is
 * the most reliable source (an skb answered by a NO_SOCKET reset has no
 * socket); fall back to the owning socket. 0 when unknown. */
static __always_inline __u32 nbs_skb_netns(const struct sk_buff *skb)
{
	struct net_device *dev;

	if (!skb)
		return 0;
	dev = skb->dev;
	if (dev)
		return dev->nd_net.net->ns.inum;
	return nbs_sk_netns(skb->sk);
}

/* A TCP/UDP 4-tuple in a family-neutral form. Addresses are in network byte
 * order (IPv4 in the first 4 bytes), ports in host byte order. */
struct nbs_tuple {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u16 family;
};

/* The kernel's sk_fullsock(): false for timewait and request sockets, which
 * share only sock_common with a full socket. */
static __always_inline bool nbs_sk_fullsock(const struct sock *sk)
{
	__u8 state = sk->__sk_common.skc_state;

	return state != TCP_TIME_WAIT && state != TCP_NEW_SYN_RECV;
}

/* Local -> remote tuple of a socket of any kind (full, request, timewait).
 * The local port of a full socket comes from inet_sport: skc_num is zeroed
 * when the socket releases its port on the way to CLOSE, which is exactly
 * when most resets are sent. */
static __always_inline void nbs_sk_tuple(const struct sock *sk, struct nbs_tuple *t)
{
	const struct sock_common *c = &sk->__sk_common;

	t->family = c->skc_family;
	if (nbs_sk_fullsock(sk))
		t->sport = bpf_ntohs(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
	else
		t->sport = c->skc_num;
	t->dport = bpf_ntohs(c->skc_dport);
	if (t->family == NBS_AF_INET6) {
		bpf_probe_read_kernel(t->saddr, 16, &c->skc_v6_rcv_saddr);
		bpf_probe_read_kernel(t->daddr, 16, &c->skc_v6_daddr);
	} else {
		__builtin_memset(t->saddr, 0, 16);
		__builtin_memset(t->daddr, 0, 16);
		*(__u32 *)t->saddr = c->skc_rcv_saddr;
		*(__u32 *)t->daddr = c->skc_daddr;
	}
}

/* Tuple of the packet in skb, read from its IP and TCP/UDP headers
 * (skb->head + network_header / transport_header, which the receive path has
 * set by the time TCP runs). Returns 0 on success, -1 if the headers could not
 * be read or the IP version is neither 4 nor 6. */
static __always_inline int nbs_skb_tuple(const struct sk_buff *skb, struct nbs_tuple *t)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u16 th = skb->transport_header;
	__u8 ver;
	__be16 ports[2];

	if (bpf_probe_read_kernel(&ver, 1, head + nh))
		return -1;
	ver >>= 4;
	if (ver == 4) {
		struct iphdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh))
			return -1;
		t->family = NBS_AF_INET;
		__builtin_memset(t->saddr, 0, 16);
		__builtin_memset(t->daddr, 0, 16);
		*(__u32 *)t->saddr = ip.saddr;
		*(__u32 *)t->daddr = ip.daddr;
	} else if (ver == 6) {
		struct ipv6hdr ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh))
			return -1;
		t->family = NBS_AF_INET6;
		__builtin_memcpy(t->saddr, &ip6.saddr, 16);
		__builtin_memcpy(t->daddr, &ip6.daddr, 16);
	} else {
		return -1;
	}
	/* source and dest are the first two fields of both tcphdr and udphdr */
	if (bpf_probe_read_kernel(ports, sizeof(ports), head + th))
		return -1;
	t->sport = bpf_ntohs(ports[0]);
	t->dport = bpf_ntohs(ports[1]);
	return 0;
}

/*
 * Add one to the counter at key in a per-CPU hash of __u64, inserting it the
 * first time; false when the map is full. Another CPU may insert the same key
 * between the lookup and the update (-EEXIST): then this CPU's slot exists
 * and is zero, so it is looked up again. Callers keep each slot written by
 * one program only, and the kernel does not nest a tracing program inside
 * itself on a CPU (it counts a recursion miss instead), so a plain increment
 * is race-free, no atomic needed.
 */
static __always_inline bool nbs_percpu_inc(void *map, const void *key)
{
	__u64 one = 1, *v;

	v = bpf_map_lookup_elem(map, key);
	if (v) {
		*v += 1;
		return true;
	}
	if (bpf_map_update_elem(map, key, &one, BPF_NOEXIST) == 0)
		return true;
	v = bpf_map_lookup_elem(map, key);
	if (v) {
		*v += 1;
		return true;
	}
	return false;
}

/*
 * Evidence rate limit shared by all CPUs: GCRA, a token bucket kept in one
 * word (*tat, the "theoretical arrival time" of the next event), so one
 * compare-and-swap both refills the bucket and takes a token. The bucket
 * holds per_sec tokens (one second's worth) and refills at per_sec a second:
 * over any span of T seconds at most per_sec * (1 + T) events pass, and a
 * storm that lasts keeps exactly that (the bucket starts full). A CPU that
 * finds the bucket empty notes when the next token is due in *denied_until
 * (its own, per-CPU) and does not touch the shared word before then, so a
 * storm costs each CPU one compare per suppressed event.
 */
static __always_inline int nbs_evidence_take(__u64 *tat, __u64 *denied_until, __u64 now, __u64 step,
					     __u64 tol)
{
	__u64 cur = *(volatile __u64 *)tat;
	__u64 base = cur > now ? cur : now;

	if (cur > now + tol) {
		*denied_until = cur - tol;
		return 0;
	}
	if (__sync_val_compare_and_swap(tat, cur, base + step) == cur)
		return 1;
	return -1; /* another CPU took a token in between: try again */
}

/* The attempts after a lost race, out of line: their code stays out of the
 * lines every event runs through (at a rare rate each is a cache miss). */
static __noinline __attribute__((unused)) bool nbs_evidence_retry(__u64 *tat, __u64 *denied_until, __u64 now,
								   __u64 step, __u64 tol)
{
	for (int i = 0; i < 3; i++) {
		int r = nbs_evidence_take(tat, denied_until, now, step, tol);

		if (r >= 0)
			return r;
	}
	/* Lost the race four times: heavy contention, so there is plenty of
	 * other evidence right now. */
	return false;
}

static __always_inline bool nbs_evidence_allowed(__u64 *tat, __u64 *denied_until, __u64 now,
						 __u32 per_sec)
{
	__u64 step, tol;
	int r;

	if (!per_sec)
		return false;
	if (now < *denied_until)
		return false;
	step = NBS_NSEC_PER_SEC / per_sec;
	tol = (__u64)(per_sec - 1) * step;
	r = nbs_evidence_take(tat, denied_until, now, step, tol);
	if (r >= 0)
		return r;
	return nbs_evidence_retry(tat, denied_until, now, step, tol);
}

/*
 * Submit flags for an evidence record. The agent polls evidence rings on a
 * timer (agent/probe/evidence.PollPeriod) instead of being woken per record:
 * the wakeup (an irq_work, an IPI on a VM) cost the packet 18-37 µs per
 * event, against ~2 µs without it (BENCHMARKS.md, "Evidence cost").
 *
 * The rate limit (nbs_evidence_allowed) bounds what can wait in the ring:
 * a burst of per_sec records, then per_sec a second. When a quarter of the
 * ring holds NBS_EVIDENCE_RING_SECONDS of that (the burst and 3 s of a
 * reader that polls late), no rate the bucket allows can bring the ring
 * near full between polls, and the record is submitted without a wakeup
 * and without asking the ring how full it is: per_sec and the sizes are
 * load-time constants, so the verifier prunes the query. The query (a
 * helper call whose code and ring positions are cold at a rare rate) was
 * the largest part of what evidence cost beyond the record itself
 * (BENCHMARKS.md, "Evidence cost per event"). At higher rates (beyond about
 * 40 a second for drops, 97 for DNS, 204 for resets, with these rings and
 * records) the reader is woken at once
 * once a quarter of the ring is waiting, so a storm cannot fill it between
 * two polls.
 */
#define NBS_EVIDENCE_RING_SECONDS 4

static __always_inline __u64 nbs_evidence_submit_flags(void *ring, __u64 ring_bytes, __u64 event_bytes,
						       __u32 per_sec)
{
	/* The kernel's 8-byte header, the record rounded up to 8. */
	__u64 record = (event_bytes + 8 + 7) & ~7ULL;

	if ((__u64)per_sec * NBS_EVIDENCE_RING_SECONDS * record <= ring_bytes / 4)
		return BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= ring_bytes / 4)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}
