//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * A netstacklat-shaped peer of bpf/latencyrx.bpf.c, for bench/latencyrx only:
 * what bpf-examples' netstacklat does per hook (read skb->tstamp, compare it
 * with bpf_ktime_get_tai_ns() less the TAI offset, count the difference in a
 * log2 histogram of its own, an array map per hook), at the attach points
 * latencyrx uses. netstacklat's own hooks are fentry programs, which this
 * kernel refuses (docs/kernel.md, "Attach points"); its tp_btf programs have
 * the same shape and cost. No namespace filter, no per-packet state: the
 * floor an always-on RX latency program is measured against.
 */
#include "nbs.h"

volatile __s64 tai_offset_ns = 0;

#define PEER_BUCKETS 32

enum peer_hook { PEER_TCP, PEER_COPY, PEER_READY, PEER_HOOKS };

struct peer_hist {
	__u64 bucket[PEER_BUCKETS];
	__u64 sum;
};

/* One map per hook, as netstacklat: array lookups, no hash. */
#define PEER_MAP(name)                                                                                                 \
	struct {                                                                                                       \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                                                               \
		__uint(max_entries, 1);                                                                                \
		__type(key, __u32);                                                                                    \
		__type(value, struct peer_hist);                                                                       \
	} name SEC(".maps")

PEER_MAP(peer_tcp);
PEER_MAP(peer_copy);
PEER_MAP(peer_ready);

static __always_inline __u32 log2l(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1)
		r += 1;
	return r;
}

static __always_inline void record(void *map, const struct sk_buff *skb)
{
	__u64 ts = skb->tstamp, now;
	struct peer_hist *h;
	__u32 zero = 0, b;
	__s64 d;

	if (!ts)
		return;
	now = bpf_ktime_get_tai_ns() - tai_offset_ns;
	d = now - ts;
	if (d < 0)
		return;
	h = bpf_map_lookup_elem(map, &zero);
	if (!h)
		return;
	b = log2l(d);
	if (b >= PEER_BUCKETS)
		b = PEER_BUCKETS - 1;
	h->bucket[b]++;
	h->sum += d;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(peer_rx_tcp, struct sock *sk, const struct sk_buff *skb)
{
	record(&peer_tcp, skb);
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(peer_rx_copy, const struct sk_buff *skb, int len)
{
	record(&peer_copy, skb);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(peer_rx_ready, const struct sock *sk)
{
	struct sk_buff *tail = sk->sk_receive_queue.prev;

	if (tail && (void *)tail != (void *)&sk->sk_receive_queue)
		record(&peer_ready, tail);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
