//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Packet sizes per device, in three places, as the netsize tool of the BPF
 * Performance Tools book measures them:
 *  - sent: what the stack hands a device (net_dev_queue, before the qdisc
 *    and before GSO segments anything): a TCP skb of many segments when
 *    TSO/GSO work, gso_size being the segment size (MSS) TCP chose;
 *  - xmit: what the driver is handed (net_dev_xmit): still large where the
 *    device does TSO (or is a veth, which passes them on whole), cut to
 *    MTU-sized frames where GSO segmented them in software;
 *  - received: what the stack takes in from a device (netif_receive_skb),
 *    after GRO merged segments (large) or not (MTU-sized).
 * Sizes are skb->len: the Ethernet header included on the way out, not on
 * the way in (eth_type_trans pulled it).
 *
 * Per packet, so triggered only: agent/probe/latencysizes attaches it while
 * the latency branch is in trouble or an operator is looking.
 */
#include "nbs.h"
#include "loglinear.h"

const volatile __u32 target_netns = 0; /* 0 = every namespace */

#define NBS_SIZES_SENT 0
#define NBS_SIZES_XMIT 1
#define NBS_SIZES_RECV 2
#define NBS_SIZES_DIRS 3

/* Devices get three histograms each (4 KiB a CPU each, so 768 KiB a CPU
 * for 64 devices), indexes handed out in order on a device's first packet
 * and kept for good; a device beyond counts in dev_full. */
#define NBS_SIZES_DEVS 64
#define NBS_SIZES_CACHE_BITS 3

struct nbs_sizes_dev {
	__u32 netns;
	__u32 ifindex;
};

struct nbs_sizes_dev_info {
	__u8 name[16]; /* NUL-terminated */
	__u32 index;   /* its histograms: index * NBS_SIZES_DIRS + direction */
	__u32 pad;
};

/* Exact counts beside each histogram: packets and bytes are what `ip -s
 * link` counts; gso_packets the packets carrying a gso_size (more than one
 * segment's worth), gso_segs their segments (gso_segs as TCP or GRO set
 * it). Not kept for xmit: the driver may have freed the skb by then. */
struct nbs_sizes_counts {
	__u64 packets;
	__u64 bytes;
	__u64 gso_packets;
	__u64 gso_segs;
};

struct nbs_sizes_cached {
	__u64 dev;   /* netns << 32 | ifindex; 0: empty */
	__u64 index; /* its device index */
};

struct nbs_sizes_stats {
	__u64 dev_full; /* not counted: the device table is full */
	/* Not counts: this CPU's recent devices (dev_index). */
	struct nbs_sizes_cached cache[1 << NBS_SIZES_CACHE_BITS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NBS_SIZES_DEVS *NBS_SIZES_DIRS);
	__type(key, __u32);
	__type(value, struct nbs_hist);
} sz_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NBS_SIZES_DEVS *NBS_SIZES_DIRS);
	__type(key, __u32);
	__type(value, struct nbs_sizes_counts);
} sz_counts SEC(".maps");

/* The next device index to hand out. */
__u32 next_dev SEC(".bss");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NBS_SIZES_DEVS);
	__type(key, struct nbs_sizes_dev);
	__type(value, struct nbs_sizes_dev_info);
} sz_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_sizes_stats);
} sz_stats SEC(".maps");

/* libbpf-dev 1.1 has no bpf_core_cast (docs/kernel.md). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

static __always_inline __u64 mix(__u64 v)
{
	return v * 0x9E3779B97F4A7C15ULL;
}

/* The index of device dev in namespace netns: from this CPU's cache of
 * recent devices, else from the device table, which the device's first
 * packet enters (named, and given the next free index); -1 when full. */
static __always_inline int dev_index(struct nbs_sizes_stats *st, const struct net_device *dev, __u32 netns)
{
	struct nbs_sizes_dev k = {.netns = netns, .ifindex = dev->ifindex};
	__u64 key = (__u64)netns << 32 | k.ifindex;
	struct nbs_sizes_dev_info *found, info = {};
	struct nbs_sizes_cached *c;

	c = &st->cache[mix(key) >> (64 - NBS_SIZES_CACHE_BITS)];
	if (c->dev == key)
		return c->index;
	found = bpf_map_lookup_elem(&sz_devs, &k);
	if (!found) {
		/* Two CPUs meeting a new device at once both take an index;
		 * the one whose entry lands wins, the other's stays unused. */
		info.index = __sync_fetch_and_add(&next_dev, 1);
		if (info.index >= NBS_SIZES_DEVS)
			return -1;
		bpf_probe_read_kernel_str(info.name, sizeof(info.name), dev->name);
		bpf_map_update_elem(&sz_devs, &k, &info, BPF_NOEXIST);
		found = bpf_map_lookup_elem(&sz_devs, &k);
		if (!found)
			return -1;
	}
	c->dev = key;
	c->index = found->index;
	return found->index;
}

/* The skb's shared info, at head + end, read with direct loads through
 * bpf_rdonly_cast (fault-tolerant loads, no helper call, as dns.bpf.c
 * reads headers). */
static __always_inline const struct skb_shared_info *shinfo(const struct sk_buff *skb)
{
	return bpf_rdonly_cast(skb->head + skb->end, bpf_core_type_id_kernel(struct skb_shared_info));
}

static __always_inline void record(const struct net_device *dev, __u32 netns, __u32 dir, __u32 len,
				   const struct sk_buff *skb)
{
	struct nbs_sizes_counts *c;
	const struct skb_shared_info *si;
	struct nbs_sizes_stats *st;
	struct nbs_hist *h;
	__u32 zero = 0, i;
	int index;

	st = bpf_map_lookup_elem(&sz_stats, &zero);
	if (!st)
		return;
	index = dev_index(st, dev, netns);
	if (index < 0) {
		st->dev_full++;
		return;
	}
	i = (__u32)index * NBS_SIZES_DIRS + dir;
	h = bpf_map_lookup_elem(&sz_hist, &i);
	c = bpf_map_lookup_elem(&sz_counts, &i);
	if (!h || !c)
		return;
	nbs_hist_record(h, len);
	c->packets++;
	c->bytes += len;
	if (!skb)
		return;
	si = shinfo(skb);
	if (si->gso_size) {
		c->gso_packets++;
		c->gso_segs += si->gso_segs;
	}
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(nbs_sizes_queue, struct sk_buff *skb)
{
	const struct net_device *dev = skb->dev;
	__u32 netns;

	if (!dev)
		return 0;
	netns = dev->nd_net.net->ns.inum;
	if (target_netns && netns != target_netns)
		return 0;
	record(dev, netns, NBS_SIZES_SENT, skb->len, skb);
	return 0;
}

/* The skb may be freed by the driver already: only the tracepoint's own
 * arguments (the device, the length it recorded) are read. Packets the
 * driver refused (rc != NETDEV_TX_OK) are retried, and counted then. */
SEC("tp_btf/net_dev_xmit")
int BPF_PROG(nbs_sizes_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	__u32 netns;

	if (rc != 0 || !dev)
		return 0;
	netns = dev->nd_net.net->ns.inum;
	if (target_netns && netns != target_netns)
		return 0;
	record(dev, netns, NBS_SIZES_XMIT, len, NULL);
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(nbs_sizes_receive, struct sk_buff *skb)
{
	const struct net_device *dev = skb->dev;
	__u32 netns;

	if (!dev)
		return 0;
	netns = dev->nd_net.net->ns.inum;
	if (target_netns && netns != target_netns)
		return 0;
	record(dev, netns, NBS_SIZES_RECV, skb->len, skb);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
