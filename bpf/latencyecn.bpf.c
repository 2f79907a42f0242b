//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * ECN codepoints of received packets per device and per peer: the IP
 * header's two ECN bits at netif_receive_skb, where the stack takes a
 * packet in from a device (skb->data is the IP header there: the link
 * header is pulled, and the network header not yet set). A packet that is
 * not ECN-capable (Not-ECT, nearly all of a host's without ECN) leaves
 * after one load; an ECN-capable one is counted under its device and source
 * address, as ECT or CE, with the segments it carries (GRO merges a flow's
 * segments, and the kernel's InCEPkts counts each).
 *
 * Per packet, so triggered only: agent/probe/latencyecn attaches it while
 * latency/ecn is in trouble or an operator is looking.
 */
#include "nbs.h"

/* libbpf-dev 1.1 has no bpf_core_cast (docs/kernel.md). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

const volatile __u32 target_netns = 0; /* 0 = every namespace */

#define NBS_ETH_P_IP 0x0800
#define NBS_ETH_P_IPV6 0x86DD
#define NBS_ECN_CE 3

/* Peers a table holds: the least recently marked go first when full
 * (counted in evicted by user space, which sees keys vanish). */
#define NBS_ECN_PEERS 4096

struct nbs_ecn_key {
	__u32 netns;
	__u32 ifindex;
	__u8 addr[16]; /* the source address; IPv4 in the first 4 bytes */
	__u32 family;
};

struct nbs_ecn_counts {
	__u64 ect;     /* ECT(0) or ECT(1) packets */
	__u64 ce;      /* CE packets */
	__u64 ce_segs; /* segments of the CE packets (GRO) */
};

struct nbs_ecn_dev_info {
	__u8 name[16];
};

struct nbs_ecn_stats {
	__u64 ecn; /* ECN-capable IP packets in scope */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, NBS_ECN_PEERS);
	__type(key, struct nbs_ecn_key);
	__type(value, struct nbs_ecn_counts);
} ecn_peers SEC(".maps");

/* Device names, by netns << 32 | ifindex, written on a device's first
 * ECN-capable packet. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, struct nbs_ecn_dev_info);
} ecn_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_ecn_stats);
} ecn_stats SEC(".maps");

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(nbs_ecn_receive, struct sk_buff *skb)
{
	const struct net_device *dev = skb->dev;
	struct nbs_ecn_key k = {};
	struct nbs_ecn_counts *c, zero_counts = {};
	struct nbs_ecn_stats *st;
	__u16 proto = skb->protocol;
	__u32 zero = 0, netns;
	__u8 ecn;

	if (!dev)
		return 0;
	netns = dev->nd_net.net->ns.inum;
	if (target_netns && netns != target_netns)
		return 0;
	if (proto == bpf_htons(NBS_ETH_P_IP)) {
		const struct iphdr *ip = bpf_rdonly_cast(skb->data, bpf_core_type_id_kernel(struct iphdr));

		ecn = ip->tos & 3;
		if (!ecn)
			return 0;
		*(__u32 *)k.addr = ip->saddr;
		k.family = NBS_AF_INET;
	} else if (proto == bpf_htons(NBS_ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = bpf_rdonly_cast(skb->data, bpf_core_type_id_kernel(struct ipv6hdr));

		/* Traffic class: the low 4 bits of the first byte, the high 4 of
		 * flow_lbl[0]; ECN is its low 2, flow_lbl[0] >> 4 & 3. */
		ecn = (ip6->flow_lbl[0] >> 4) & 3;
		if (!ecn)
			return 0;
		if (bpf_probe_read_kernel(k.addr, 16, &ip6->saddr))
			return 0;
		k.family = NBS_AF_INET6;
	} else {
		return 0;
	}
	k.netns = netns;
	k.ifindex = dev->ifindex;
	st = bpf_map_lookup_elem(&ecn_stats, &zero);
	if (st)
		st->ecn++;
	c = bpf_map_lookup_elem(&ecn_peers, &k);
	if (!c) {
		__u64 dk = (__u64)netns << 32 | k.ifindex;

		if (!bpf_map_lookup_elem(&ecn_devs, &dk)) {
			struct nbs_ecn_dev_info info = {};

			bpf_probe_read_kernel_str(info.name, sizeof(info.name), dev->name);
			bpf_map_update_elem(&ecn_devs, &dk, &info, BPF_NOEXIST);
		}
		bpf_map_update_elem(&ecn_peers, &k, &zero_counts, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&ecn_peers, &k);
		if (!c)
			return 0;
	}
	if (ecn == NBS_ECN_CE) {
		const struct skb_shared_info *si =
			bpf_rdonly_cast(skb->head + skb->end, bpf_core_type_id_kernel(struct skb_shared_info));
		__u16 segs = si->gso_segs;

		c->ce++;
		c->ce_segs += segs > 1 ? segs : 1;
	} else {
		c->ect++;
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
