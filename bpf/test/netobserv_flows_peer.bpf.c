//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * A peer of bpf/flows.bpf.c shaped like NetObserv's flow tracker
 * (netobserv-ebpf-agent, bpf/flows.c: a TC program on each interface,
 * ingress and egress), for bench/flows only. Per packet, as that tracker
 * does: parse the Ethernet, IPv4/IPv6 and TCP/UDP headers with direct
 * packet access, build the flow id (addresses, ports, protocol, direction,
 * interface), and in a per-CPU hash of flows sized for 100,000 of them
 * either update the flow's packets, bytes, last time and TCP flags or
 * insert it. NetObserv's user space evicts the map every few seconds; the
 * benchmark does not. No sampling, no DNS/RTT/drop extensions, no ring
 * buffer fallback when the map is full.
 */
#include "nbs.h"

#define PEER_ETH_P_IP 0x0800
#define PEER_ETH_P_IPV6 0x86DD
#define PEER_TC_ACT_OK 0

struct peer_flow_id {
	__u8 src_ip[16];
	__u8 dst_ip[16];
	__u16 eth_protocol;
	__u16 src_port;
	__u16 dst_port;
	__u8 transport_protocol;
	__u8 direction;
	__u32 if_index;
};

struct peer_flow_metrics {
	__u64 packets;
	__u64 bytes;
	__u64 start_mono_time_ts;
	__u64 end_mono_time_ts;
	__u16 flags;
	__u8 errno_;
	__u8 dscp;
	__u32 sampling;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 100000);
	__type(key, struct peer_flow_id);
	__type(value, struct peer_flow_metrics);
} peer_flows SEC(".maps");

static __always_inline int track(struct __sk_buff *skb, __u8 direction)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct peer_flow_id id = {};
	struct peer_flow_metrics *m;
	__u64 now = bpf_ktime_get_ns();
	__u16 flags = 0;
	void *l4;

	if ((void *)(eth + 1) > end)
		return PEER_TC_ACT_OK;
	id.eth_protocol = bpf_ntohs(eth->h_proto);
	id.direction = direction;
	id.if_index = skb->ifindex;
	if (id.eth_protocol == PEER_ETH_P_IP) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end)
			return PEER_TC_ACT_OK;
		__builtin_memcpy(id.src_ip + 12, &ip->saddr, 4);
		__builtin_memcpy(id.dst_ip + 12, &ip->daddr, 4);
		id.src_ip[10] = id.src_ip[11] = id.dst_ip[10] = id.dst_ip[11] = 0xff;
		id.transport_protocol = ip->protocol;
		l4 = (void *)ip + ip->ihl * 4;
	} else if (id.eth_protocol == PEER_ETH_P_IPV6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end)
			return PEER_TC_ACT_OK;
		__builtin_memcpy(id.src_ip, &ip6->saddr, 16);
		__builtin_memcpy(id.dst_ip, &ip6->daddr, 16);
		id.transport_protocol = ip6->nexthdr;
		l4 = ip6 + 1;
	} else {
		return PEER_TC_ACT_OK;
	}
	if (id.transport_protocol == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end)
			return PEER_TC_ACT_OK;
		id.src_port = bpf_ntohs(th->source);
		id.dst_port = bpf_ntohs(th->dest);
		flags = ((__u8 *)th)[13];
	} else if (id.transport_protocol == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > end)
			return PEER_TC_ACT_OK;
		id.src_port = bpf_ntohs(uh->source);
		id.dst_port = bpf_ntohs(uh->dest);
	}
	m = bpf_map_lookup_elem(&peer_flows, &id);
	if (m) {
		m->packets++;
		m->bytes += skb->len;
		m->end_mono_time_ts = now;
		m->flags |= flags;
		return PEER_TC_ACT_OK;
	}
	struct peer_flow_metrics nm = {
		.packets = 1, .bytes = skb->len, .start_mono_time_ts = now, .end_mono_time_ts = now, .flags = flags,
	};
	bpf_map_update_elem(&peer_flows, &id, &nm, BPF_NOEXIST);
	return PEER_TC_ACT_OK;
}

SEC("tc")
int peer_flow_ingress(struct __sk_buff *skb)
{
	return track(skb, 0);
}

SEC("tc")
int peer_flow_egress(struct __sk_buff *skb)
{
	return track(skb, 1);
}

char LICENSE[] SEC("license") = "GPL";
