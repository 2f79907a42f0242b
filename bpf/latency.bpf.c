//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * TCP retransmitted segments and retransmission timeouts, counted exactly
 * as the kernel's TcpRetransSegs and (for established sockets) TCPTimeouts
 * count them.
 *
 * Loaded by agent/probe/latency. tp_btf/tcp_retransmit_skb fires at the end
 * of every retransmission attempt, including tail loss probes and attempts
 * that failed (err != 0, nothing sent), and its skb may stand for several
 * segments. Counting events, or the skb's segment count after the send,
 * misses segments (docs/kernel.md, "Retransmits and RTOs"). This reads the
 * socket's own lifetime counters, tcp_sock.total_retrans (incremented with
 * TcpRetransSegs) and total_rto (incremented with TCPTimeouts on each
 * retransmission timeout), and adds how much each grew since the last event
 * on that socket. The last values live in socket-local storage, which dies
 * with the socket: no table to size, no hash keyed by pointer, no leak.
 *
 * SYN-ACK retransmissions of half-open connections belong to request
 * sockets, which have no tcp_sock; the kernel counts them in TcpRetransSegs
 * and reports them on tp_btf/tcp_retransmit_synack, counted here one each.
 */
#include "nbs.h"

const volatile __u32 target_netns = 0; /* 0 = every namespace */

/* The tracepoints hand over a struct sock; the verifier allows direct reads
 * only within the type it was given. This kfunc re-types the pointer for
 * reading (fault-tolerant loads, no helper call); libbpf 1.1 has no
 * bpf_core_cast wrapper for it. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

static __always_inline const struct tcp_sock *as_tcp_sock(const struct sock *sk)
{
	return bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct tcp_sock));
}

/* The last counters seen on one socket. */
struct nbs_rtx_sock {
	__u32 retrans; /* tcp_sock.total_retrans */
	__u16 rto;     /* tcp_sock.total_rto */
	__u8 seen;     /* 0 until the first event on this socket */
	__u8 pad;
};

/* Per-CPU totals. Each field has a single writing program (two programs may
 * nest on a CPU, one program never nests inside itself), so plain
 * increments are safe. */
struct nbs_rtx_counts {
	__u64 segs;       /* retransmitted segments of full sockets (Σ total_retrans growth) */
	__u64 rtos;       /* retransmission timeouts (Σ total_rto growth) */
	__u64 synack;     /* SYN-ACKs retransmitted */
	__u64 synack_rtos; /* retransmission timeouts of TCP Fast Open sockets, seen on SYN-ACKs */
	__u64 events;     /* tcp_retransmit_skb hits */
	__u64 failed;     /* ... of which the attempt failed (err != 0): nothing sent */
	__u64 first_seen; /* sockets first seen here (storage created) */
	__u64 no_storage; /* events on sockets whose storage could not be had */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nbs_rtx_sock);
} rtx_sock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_rtx_counts);
} rtx_counts SEC(".maps");

static __always_inline struct nbs_rtx_counts *counts(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&rtx_counts, &zero);
}

/* Segments the skb stands for (tcp_skb_pcount: the GSO segment count kept
 * in the TCP control block), at least 1. */
static __always_inline __u32 skb_pcount(const struct sk_buff *skb)
{
	const struct tcp_skb_cb *cb = (const struct tcp_skb_cb *)&skb->cb[0];
	__u16 segs = BPF_CORE_READ(cb, tcp_gso_segs);

	return segs ? segs : 1;
}

/*
 * The kernel calls this with the socket locked, so events on one socket never
 * race each other and the storage needs no atomics.
 *
 * On a socket's first event, its lifetime counters include whatever happened
 * before this probe was attached. A socket born after that has, at its first
 * event, total_retrans equal to this attempt's segments (0 if it failed) and
 * total_rto at most 1; so the first event counts min(total_retrans, this
 * skb's segments) and, when the socket is in loss recovery (an RTO just
 * happened), min(total_rto, 1). That is exact for sockets born after the
 * attach and counts only the current attempt for older ones.
 */
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(nbs_tcp_retransmit_skb, const struct sock *sk, const struct sk_buff *skb, int err)
{
	const struct tcp_sock *tp;
	struct nbs_rtx_counts *c;
	struct nbs_rtx_sock *st;
	__u32 retrans;
	__u16 rto;

	if (target_netns && nbs_sk_netns(sk) != target_netns)
		return 0;
	c = counts();
	if (!c)
		return 0;
	c->events++;
	if (err)
		c->failed++;
	tp = as_tcp_sock(sk);
	retrans = tp->total_retrans;
	rto = tp->total_rto;
	st = bpf_sk_storage_get(&rtx_sock, (struct sock *)sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		/* Out of memory for storage: the best remaining estimate. */
		c->no_storage++;
		if (!err)
			c->segs += skb_pcount(skb);
		return 0;
	}
	if (!st->seen) {
		__u32 segs = err ? 0 : skb_pcount(skb);
		__u8 ca = BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state);

		c->first_seen++;
		c->segs += retrans < segs ? retrans : segs;
		if (rto && ca == TCP_CA_Loss)
			c->rtos++;
		st->seen = 1;
	} else {
		c->segs += (__u32)(retrans - st->retrans);
		c->rtos += (__u16)(rto - st->rto);
	}
	st->retrans = retrans;
	st->rto = rto;
	return 0;
}

/*
 * A SYN-ACK retransmitted: for a half-open connection sk is the listener; for
 * a TCP Fast Open connection it is the new full socket, whose total_retrans
 * the kernel also bumped (and whose total_rto it bumps on a SYN-ACK
 * timeout). There the storage is brought up to date so the next
 * tcp_retransmit_skb event does not count this SYN-ACK a second time.
 */
SEC("tp_btf/tcp_retransmit_synack")
int BPF_PROG(nbs_tcp_retransmit_synack, const struct sock *sk, const struct request_sock *req)
{
	const struct tcp_sock *tp;
	struct nbs_rtx_counts *c;
	struct nbs_rtx_sock *st;
	__u16 rto;

	if (target_netns && nbs_sk_netns(sk) != target_netns)
		return 0;
	c = counts();
	if (!c)
		return 0;
	c->synack++;
	if (sk->__sk_common.skc_state == TCP_LISTEN)
		return 0;
	st = bpf_sk_storage_get(&rtx_sock, (struct sock *)sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 0;
	tp = as_tcp_sock(sk);
	rto = tp->total_rto;
	if (st->seen)
		c->synack_rtos += (__u16)(rto - st->rto);
	else
		c->synack_rtos += rto ? 1 : 0;
	st->retrans = tp->total_retrans;
	st->rto = rto;
	st->seen = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
