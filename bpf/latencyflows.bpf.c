//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Per-flow detail for the latency branch: each TCP flow's smoothed RTT,
 * congestion window and retransmit total, sampled from tp_btf/tcp_probe.
 *
 * tcp_probe fires for every segment an established socket receives, so the
 * program is rate-limited twice before it touches the flow table: at most
 * one sample per flow every min_gap_ns (a timestamp in the socket's own
 * storage), and at most samples_per_sec per CPU.
 *
 * Before either, a gate that reads only the socket (in cache: TCP is
 * processing it) and the jiffies counter: a flow is considered once per
 * clock tick (1-10 ms, CONFIG_HZ), at the first segment of a tick — one
 * whose socket saw no segment yet in that tick (rcv_tstamp and lrcvtime,
 * which TCP sets to the tick of every ACK and data segment it takes, right
 * after tcp_probe). A bulk flow's other segments, nearly all of them, leave
 * there, before the clock read and the socket-storage lookup. A sample can
 * thus come up to one tick later than min_gap_ns allows: a flow is still
 * sampled if it receives a segment in a tick that starts after min_gap_ns
 * has passed, whose first segment is considered. Triggered only:
 * agent/probe/latencyflows attaches it while the latency branch is in trouble
 * or an operator is looking.
 */
#include "nbs.h"

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

const volatile __u32 target_netns = 0;        /* 0 = every namespace */
const volatile __u64 min_gap_ns = 100000000;  /* per flow */
const volatile __u32 samples_per_sec = 1000;  /* per CPU */

struct nbs_flow {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u16 pad;
	__u32 netns;
	__u32 srtt_us;       /* smoothed RTT */
	__u32 rttvar_us;     /* mean deviation */
	__u32 min_rtt_us;
	__u32 snd_cwnd;
	__u32 total_retrans; /* segments retransmitted over the flow's life */
	__u32 first_retrans; /* total_retrans when the flow was first sampled */
	__u64 last_ns;       /* last sample */
	__u64 samples;
};

struct nbs_flow_sock {
	__u64 last_ns;
};

struct nbs_flow_stats {
	__u64 seen;       /* tcp_probe hits in scope */
	__u64 considered; /* of which past the tick gate */
	__u64 sampled;
	__u64 suppressed; /* over samples_per_sec */
	__u64 table_full; /* flow table inserts that failed */
	__u64 window_sec; /* the second the budget below belongs to */
	__u64 window_used;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* socket cookie */
	__type(value, struct nbs_flow);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nbs_flow_sock);
} flow_sock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_flow_stats);
} flow_stats SEC(".maps");

SEC("tp_btf/tcp_probe")
int BPF_PROG(nbs_flow_probe, struct sock *sk, const struct sk_buff *skb)
{
	const struct tcp_sock *tk;
	struct nbs_flow_stats *st;
	struct nbs_flow_sock *fs;
	struct nbs_flow *f;
	struct tcp_sock *tp;
	struct nbs_tuple t;
	__u64 now, cookie, sec;
	__u32 zero = 0, tick;

	if (target_netns && nbs_sk_netns(sk) != target_netns)
		return 0;
	st = bpf_map_lookup_elem(&flow_stats, &zero);
	if (!st)
		return 0;
	st->seen++;
	/* The tick gate (above). tcp_probe runs only in tcp_rcv_established,
	 * so sk is a full TCP socket. */
	tk = bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct tcp_sock));
	tick = (__u32)bpf_jiffies64();
	if (tk->rcv_tstamp == tick || tk->inet_conn.icsk_ack.lrcvtime == tick)
		return 0;
	st->considered++;
	now = bpf_ktime_get_ns();
	fs = bpf_sk_storage_get(&flow_sock, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!fs || (fs->last_ns && now - fs->last_ns < min_gap_ns))
		return 0;
	sec = now / NBS_NSEC_PER_SEC;
	if (st->window_sec != sec) {
		st->window_sec = sec;
		st->window_used = 0;
	}
	if (st->window_used >= samples_per_sec) {
		st->suppressed++;
		return 0;
	}
	st->window_used++;
	fs->last_ns = now;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;

	cookie = bpf_get_socket_cookie(sk);
	f = bpf_map_lookup_elem(&flows, &cookie);
	if (!f) {
		struct nbs_flow nf = {};

		nbs_sk_tuple(sk, &t);
		__builtin_memcpy(nf.saddr, t.saddr, 16);
		__builtin_memcpy(nf.daddr, t.daddr, 16);
		nf.sport = t.sport;
		nf.dport = t.dport;
		nf.family = t.family;
		nf.netns = nbs_sk_netns(sk);
		nf.first_retrans = tp->total_retrans;
		if (bpf_map_update_elem(&flows, &cookie, &nf, BPF_NOEXIST) && bpf_map_lookup_elem(&flows, &cookie) == NULL) {
			st->table_full++;
			return 0;
		}
		f = bpf_map_lookup_elem(&flows, &cookie);
		if (!f)
			return 0;
	}
	f->srtt_us = tp->srtt_us >> 3;
	f->rttvar_us = tp->mdev_us >> 2;
	f->min_rtt_us = tp->rtt_min.s[0].v;
	f->snd_cwnd = tp->snd_cwnd;
	f->total_retrans = tp->total_retrans;
	f->last_ns = now;
	f->samples++;
	st->sampled++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
