//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * kfree_skb counted the way cloudflare/ebpf_exporter's examples count it,
 * for bench/evidencecost to measure beside the agent's drops program:
 *
 *  - exporter_kfree_skb: its current example's shape: tp_btf/kfree_skb,
 *    the packet's Ethernet, IP and TCP/UDP headers read with
 *    bpf_probe_read_kernel for a key of (ethernet protocol, IP protocol,
 *    destination port, reason), and a BPF_MAP_TYPE_HASH entry found or
 *    inserted, then incremented with __sync_fetch_and_add (its maps.bpf.h
 *    increment_map).
 *  - exporter_kfree_skb_reason: the older, smaller shape: keyed by the
 *    drop reason alone, the same hash and atomic increment. Attached as
 *    tp_btf to the same tracepoint skb:kfree_skb (the classic tracepoint
 *    attach needs tracefs, which this machine does not mount; the agent's
 *    programs are all tp_btf, docs/kernel.md).
 *
 * Written for this benchmark after those examples; neither filters by
 * namespace (the exporter has no such option).
 */
#include "nbs.h"

#define PEER_ETH_P_IP 0x0800
#define PEER_ETH_P_IPV6 0x86DD

struct exporter_key {
	__u16 eth_proto;
	__u16 ip_proto;
	__u16 port;
	__u16 reason;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct exporter_key);
	__type(value, __u64);
} exporter_total SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} exporter_by_reason SEC(".maps");

static __always_inline void increment(void *map, void *key)
{
	__u64 zero = 0, *v = bpf_map_lookup_elem(map, key);

	if (!v) {
		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(map, key);
		if (!v)
			return;
	}
	__sync_fetch_and_add(v, 1);
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(exporter_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	struct exporter_key key = {};
	struct ethhdr eth;
	struct iphdr ip;
	struct ipv6hdr ip6;
	struct tcphdr tcp;
	struct udphdr udp;
	__u16 ip_proto = 0;

	if (skb->mac_header == (typeof(skb->mac_header))~0U)
		return 0;
	if (bpf_probe_read_kernel(&eth, sizeof(eth), skb->head + skb->mac_header))
		return 0;
	key.eth_proto = bpf_ntohs(eth.h_proto);
	if (!key.eth_proto && !bpf_ntohs(skb->protocol))
		return 0;
	switch (key.eth_proto) {
	case PEER_ETH_P_IP:
		if (bpf_probe_read_kernel(&ip, sizeof(ip), skb->head + skb->network_header) < 0)
			return 0;
		ip_proto = ip.protocol;
		break;
	case PEER_ETH_P_IPV6:
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), skb->head + skb->network_header) < 0)
			return 0;
		ip_proto = ip6.nexthdr;
		break;
	}
	key.ip_proto = ip_proto;
	if (skb->transport_header == (typeof(skb->transport_header))~0U)
		return 0;
	switch (ip_proto) {
	case IPPROTO_TCP:
		if (bpf_probe_read_kernel(&tcp, sizeof(tcp), skb->head + skb->transport_header) < 0)
			return 0;
		key.port = bpf_ntohs(tcp.dest);
		break;
	case IPPROTO_UDP:
		if (bpf_probe_read_kernel(&udp, sizeof(udp), skb->head + skb->transport_header) < 0)
			return 0;
		key.port = bpf_ntohs(udp.dest);
		break;
	}
	key.reason = reason;
	increment(&exporter_total, &key);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(exporter_kfree_skb_reason, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	__u32 key = reason;

	increment(&exporter_by_reason, &key);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
