//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * netstacklat as its upstream source (xdp-project/bpf-examples,
 * netstacklat/netstacklat.bpf.c) shapes it since mid-2025, for
 * bench/latencyrx beside bpf/latencyrx.bpf.c and the older shape
 * (netstacklat_peer.bpf.c: one per-CPU array of log2 buckets per hook).
 * Written for this benchmark after that source, with its defaults (no
 * filter, no grouping, head-of-line-blocked reads left out), at the hooks
 * latencyrx uses (upstream's are fentry/fexit, which this kernel refuses;
 * docs/kernel.md, "Attach points"). What it does per packet:
 *
 *  - every hook: skip a packet whose tstamp_type says the stamp is a
 *    sender's (6.11+); the filters (ifindex, namespace, pid, cgroup,
 *    socket queue length) are load-time constants, off, so the verifier
 *    prunes them; RX stamp against bpf_ktime_get_tai_ns() less the TAI
 *    offset;
 *  - one histogram for every hook, a BPF_MAP_TYPE_PERCPU_HASH keyed by
 *    (cgroup, ifindex, hook, bucket): the bucket's entry is looked up (and
 *    inserted the first time) and incremented, then the sum's entry (the
 *    last "bucket") likewise: two hash lookups a packet;
 *  - the TCP read (upstream: tcp_recv_timestamp; here the first
 *    skb_copy_datagram_iovec, as latencyrx) first asks whether the read
 *    may be head-of-line blocked: it reads the socket's count of
 *    out-of-order packets (bpf_core_read), and only when it has ever had
 *    some keeps a range in socket storage.
 *
 * The UDP read (upstream: skb_consume_udp) has no counterpart here:
 * latencyrx times it at sock_recv_length, where no skb is at hand.
 */
#include "nbs.h"

volatile __s64 tai_offset_ns = 0;

#define PEER_MAX_SLOT 34
#define PEER_NBUCKETS (PEER_MAX_SLOT + 2)

enum peer_hook {
	PEER_HOOK_INVALID = 0,
	PEER_HOOK_IP_RCV,
	PEER_HOOK_TCP_START,
	PEER_HOOK_UDP_START,
	PEER_HOOK_TCP_SOCK_ENQUEUED,
	PEER_HOOK_UDP_SOCK_ENQUEUED,
	PEER_HOOK_TCP_SOCK_READ,
	PEER_HOOK_UDP_SOCK_READ,
	PEER_N_HOOKS,
};

struct peer_key {
	__u64 cgroup;
	__u32 ifindex;
	__u16 hook;
	__u16 bucket;
};

struct peer_config {
	__u32 network_ns;
	__u32 min_sockqueue_len;
	bool filter_ifindex;
	bool groupby_ifindex;
	bool groupby_cgroup;
	bool include_hol_blocked;
};

const volatile struct peer_config peer_config = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, PEER_NBUCKETS * PEER_N_HOOKS * 64);
	__type(key, struct peer_key);
	__type(value, __u64);
} peer_latency SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384 + 1);
	__type(key, __u32);
	__type(value, __u64);
} peer_ifindex_filter SEC(".maps");

struct peer_ooo {
	__u32 prev_ooo;
	__u32 seq_end;
	bool active;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct peer_ooo);
} peer_ooo_range SEC(".maps");

/* floor(log2(v)), 0 for 0: the branch-free halving upstream's bits.bpf.h
 * does. */
static __always_inline __u32 peer_log2(__u64 v)
{
	__u32 r = 0, s;

	s = (v > 0xFFFFFFFFULL) << 5;
	v >>= s;
	r |= s;
	s = (v > 0xFFFF) << 4;
	v >>= s;
	r |= s;
	s = (v > 0xFF) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xF) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	return r | (__u32)(v >> 1);
}

/* Find or insert the entry of key, as ebpf_exporter's lookup-or-try-init. */
static __always_inline __u64 *entry(struct peer_key *key)
{
	__u64 zero = 0, *v = bpf_map_lookup_elem(&peer_latency, key);

	if (v)
		return v;
	bpf_map_update_elem(&peer_latency, key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&peer_latency, key);
}

static __always_inline void record(struct peer_key key, __s64 tstamp)
{
	__u64 *c, d;
	__s64 now;
	__u32 b;

	if (tstamp <= 0)
		return;
	now = bpf_ktime_get_tai_ns() - tai_offset_ns;
	if (tstamp > now)
		return;
	d = now - tstamp;
	/* Right-inclusive buckets: round the log up. */
	b = peer_log2(d);
	if (b > 0 && (1ULL << b) < d)
		b++;
	if (b > PEER_MAX_SLOT)
		b = PEER_MAX_SLOT;
	key.bucket = b;
	c = entry(&key);
	if (c)
		(*c)++;
	if (!d)
		return;
	key.bucket = PEER_MAX_SLOT + 1;
	c = entry(&key);
	if (c)
		*c += d;
}

static __always_inline bool filter_ifindex(__u32 ifindex)
{
	__u64 *ok;

	if (!peer_config.filter_ifindex)
		return true;
	ok = bpf_map_lookup_elem(&peer_ifindex_filter, &ifindex);
	return ok && *ok;
}

static __always_inline bool filter_netns(const struct sock *sk)
{
	if (!peer_config.network_ns)
		return true;
	return nbs_sk_netns(sk) == peer_config.network_ns;
}

/* An skb reaching its socket (upstream's record_skb_latency). */
static __always_inline void record_skb(const struct sk_buff *skb, const struct sock *sk, __u16 hook)
{
	struct peer_key key = {.hook = hook};

	if (BPF_CORE_READ_BITFIELD(skb, tstamp_type) > 0)
		return;
	if (!filter_ifindex(skb->skb_iif) || !filter_netns(sk))
		return;
	if (peer_config.groupby_ifindex)
		key.ifindex = skb->skb_iif;
	record(key, skb->tstamp);
}

/* Whether a TCP read may wait behind a retransmission (upstream's
 * tcp_read_maybe_holblocked): only a socket that has had out-of-order
 * packets keeps state. */
static __always_inline bool maybe_holblocked(const struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct peer_ooo *r;
	__u32 ooo = 0, copied = 0;

	if (bpf_core_read(&ooo, sizeof(ooo), &tp->rcv_ooopack))
		return true;
	if (!ooo)
		return false;
	r = bpf_sk_storage_get(&peer_ooo_range, (struct sock *)sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!r)
		return true;
	if (ooo > r->prev_ooo) {
		r->prev_ooo = ooo;
		r->seq_end = BPF_CORE_READ(tp, rcv_nxt);
		r->active = true;
		return true;
	}
	if (!r->active)
		return false;
	if (bpf_core_read(&copied, sizeof(copied), &tp->copied_seq))
		return true;
	if ((__s32)(r->seq_end - copied) < 0) {
		r->active = false;
		return false;
	}
	return true;
}

/* A read (upstream's record_socket_latency). */
static __always_inline void record_read(const struct sock *sk, const struct sk_buff *skb, __u16 hook)
{
	struct peer_key key = {.hook = hook};

	if (peer_config.min_sockqueue_len && sk->sk_receive_queue.qlen < peer_config.min_sockqueue_len)
		return;
	if (!filter_ifindex(skb->skb_iif) || !filter_netns(sk))
		return;
	if (peer_config.groupby_ifindex)
		key.ifindex = skb->skb_iif;
	record(key, skb->tstamp);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(cur_rx_tcp, struct sock *sk, const struct sk_buff *skb)
{
	record_skb(skb, sk, PEER_HOOK_TCP_SOCK_ENQUEUED);
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(cur_rx_copy, const struct sk_buff *skb, int len)
{
	const struct sock *sk = skb->sk;

	if (!sk || sk->sk_protocol != IPPROTO_TCP)
		return 0;
	if (!peer_config.include_hol_blocked && maybe_holblocked(sk))
		return 0;
	record_read(sk, skb, PEER_HOOK_TCP_SOCK_READ);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(cur_rx_ready, const struct sock *sk)
{
	struct sk_buff *tail;

	if (sk->sk_protocol != IPPROTO_UDP)
		return 0;
	tail = sk->sk_receive_queue.prev;
	if (tail && (void *)tail != (void *)&sk->sk_receive_queue)
		record_skb(tail, sk, PEER_HOOK_UDP_SOCK_ENQUEUED);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
