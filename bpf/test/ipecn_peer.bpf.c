//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * An ipecn-shaped peer of bpf/latencyecn.bpf.c, for bench/latencyecn only:
 * what the ipecn tool of the BPF Performance Tools book (bpftrace, on
 * ip_rcv) does per packet: the IPv4 header found from the skb and its TOS
 * read as bpftrace reads through a pointer (bpf_probe_read_kernel, one per
 * dereference), and for a CE mark an event to user space (bpftrace's
 * printf: here a ring buffer record of the addresses) and a count. IPv4
 * only, no device, no namespace. ipecn's kprobe cannot attach here
 * (CONFIG_KPROBES is off): this is a tp_btf program at netif_receive_skb,
 * where the IP header is at skb->data (ip_rcv finds it at the network
 * header, set just after).
 */
#include "nbs.h"

struct peer_ce_event {
	__u32 saddr;
	__u32 daddr;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} peer_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} peer_ce SEC(".maps");

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(peer_ipecn, struct sk_buff *skb)
{
	struct peer_ce_event *e;
	unsigned char *data;
	struct iphdr iph;
	__u16 proto;
	__u32 zero = 0;
	__u64 *n;

	if (bpf_probe_read_kernel(&proto, sizeof(proto), &skb->protocol) || proto != bpf_htons(0x0800))
		return 0;
	if (bpf_probe_read_kernel(&data, sizeof(data), &skb->data))
		return 0;
	if (bpf_probe_read_kernel(&iph, sizeof(iph), data))
		return 0;
	if ((iph.tos & 3) != 3)
		return 0;
	n = bpf_map_lookup_elem(&peer_ce, &zero);
	if (n)
		(*n)++;
	e = bpf_ringbuf_reserve(&peer_events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->saddr = iph.saddr;
	e->daddr = iph.daddr;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
