//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * A netsize-shaped peer of bpf/latencysizes.bpf.c, for bench/latencysizes
 * only: what the netsize tool of the BPF Performance Tools book (bpftrace,
 * `@send_bytes = hist(args->len)` and the like) does per packet: a
 * power-of-two bucket of the length, counted in a per-CPU hash map keyed
 * by the bucket (as bpftrace keeps a hist() map), one map per tracepoint,
 * no device, no namespace, no GSO fields. netsize attaches to classic
 * tracepoints, which need tracefs, not mounted here: these are tp_btf
 * programs reading skb->len directly, which spares the peer the kernel's
 * filling of a tracepoint record (in its favour).
 */
#include "nbs.h"

#define PEER_MAP(name)                                                                                                 \
	struct {                                                                                                       \
		__uint(type, BPF_MAP_TYPE_PERCPU_HASH);                                                                \
		__uint(max_entries, 64);                                                                               \
		__type(key, __u64);                                                                                    \
		__type(value, __u64);                                                                                  \
	} name SEC(".maps")

PEER_MAP(peer_send_bytes);     /* net_dev_queue */
PEER_MAP(peer_nic_send_bytes); /* net_dev_xmit */
PEER_MAP(peer_recv_bytes);     /* netif_receive_skb */

/* bpftrace's hist() bucket: 0 for 0, else 1 + the top bit's position. */
static __always_inline __u64 log2_bucket(__u64 v)
{
	__u64 r = 0;

	if (!v)
		return 0;
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
	return r + 1;
}

static __always_inline void hist(void *map, __u64 v)
{
	__u64 k = log2_bucket(v), one = 1, *n;

	n = bpf_map_lookup_elem(map, &k);
	if (n)
		(*n)++;
	else
		bpf_map_update_elem(map, &k, &one, BPF_ANY);
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(peer_net_dev_queue, struct sk_buff *skb)
{
	hist(&peer_send_bytes, skb->len);
	return 0;
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(peer_net_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	hist(&peer_nic_send_bytes, len);
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(peer_netif_receive_skb, struct sk_buff *skb)
{
	hist(&peer_recv_bytes, skb->len);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
