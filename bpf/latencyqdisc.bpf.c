//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Time packets spend between dev_queue_xmit and the driver, per device: the
 * qdisc's queue (and the device's TX lock). net_dev_queue fires when a
 * packet enters __dev_queue_xmit, net_dev_start_xmit when the driver is
 * handed it; unlike qdisc_enqueue/qdisc_dequeue both fire on devices
 * without a qdisc (noqueue) too (docs/kernel.md, "Qdisc sojourn").
 *
 * Per packet, so triggered only: agent/probe/latencyqdisc attaches it while
 * the latency branch is in trouble or an operator is looking.
 */
#include "nbs.h"
#include "loglinear.h"

const volatile __u32 target_netns = 0; /* 0 = every namespace */

struct nbs_qdisc_dev {
	__u32 netns;
	__u32 ifindex;
};

/* In flight: skb address -> when it was queued. The skb's data head is
 * kept too, so a new skb that happens to reuse the address of one that was
 * dropped in the qdisc (and so never reached the driver) does not match. */
struct nbs_qdisc_pkt {
	__u64 queued_ns;
	__u64 head;
};

struct nbs_qdisc_dev_info {
	__u8 name[16]; /* NUL-terminated */
};

struct nbs_qdisc_stats {
	__u64 queued;   /* packets entering dev_queue_xmit in scope */
	__u64 matched;  /* of which timed to the driver */
	__u64 dev_full; /* not counted: the device table is full */
	__u64 stale;    /* an entry for a reused skb address, or a clock step */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct nbs_qdisc_pkt);
} qd_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 256);
	__type(key, struct nbs_qdisc_dev);
	__type(value, struct nbs_hist);
} qd_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct nbs_qdisc_dev);
	__type(value, struct nbs_qdisc_dev_info);
} qd_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_qdisc_stats);
} qd_stats SEC(".maps");

/* A zeroed histogram to insert: too big for the stack. */
const struct nbs_hist nbs_zero_hist = {};

static __always_inline struct nbs_qdisc_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&qd_stats, &zero);
}

static __always_inline struct nbs_hist *dev_hist(const struct net_device *dev, __u32 netns)
{
	struct nbs_qdisc_dev k = {.netns = netns, .ifindex = dev->ifindex};
	struct nbs_qdisc_dev_info info = {};
	struct nbs_hist *h;

	h = bpf_map_lookup_elem(&qd_hist, &k);
	if (h)
		return h;
	/* First packet of this device: name it, then make its histogram. */
	bpf_probe_read_kernel_str(info.name, sizeof(info.name), dev->name);
	bpf_map_update_elem(&qd_devs, &k, &info, BPF_NOEXIST);
	bpf_map_update_elem(&qd_hist, &k, &nbs_zero_hist, BPF_NOEXIST);
	return bpf_map_lookup_elem(&qd_hist, &k);
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(nbs_qdisc_queue, struct sk_buff *skb)
{
	struct nbs_qdisc_pkt v;
	struct nbs_qdisc_stats *st;
	__u64 key = (__u64)skb;

	if (target_netns && nbs_skb_netns(skb) != target_netns)
		return 0;
	v.queued_ns = bpf_ktime_get_ns();
	v.head = (__u64)skb->head;
	bpf_map_update_elem(&qd_inflight, &key, &v, BPF_ANY);
	st = stats();
	if (st)
		st->queued++;
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(nbs_qdisc_xmit, const struct sk_buff *skb, const struct net_device *dev)
{
	struct nbs_qdisc_stats *st;
	struct nbs_qdisc_pkt *v;
	struct nbs_hist *h;
	__u64 key = (__u64)skb, now, queued;

	v = bpf_map_lookup_elem(&qd_inflight, &key);
	if (!v)
		return 0;
	/* A dropped skb's memory, head included, can be reused for another
	 * namespace's packet: never time a device outside the scope. */
	if (target_netns && dev->nd_net.net->ns.inum != target_netns) {
		bpf_map_delete_elem(&qd_inflight, &key);
		return 0;
	}
	now = bpf_ktime_get_ns();
	queued = v->queued_ns;
	if (v->head != (__u64)skb->head || now < queued) {
		bpf_map_delete_elem(&qd_inflight, &key);
		st = stats();
		if (st)
			st->stale++;
		return 0;
	}
	bpf_map_delete_elem(&qd_inflight, &key);
	st = stats();
	h = dev_hist(dev, dev->nd_net.net->ns.inum);
	if (!h) {
		if (st)
			st->dev_full++;
		return 0;
	}
	nbs_hist_record(h, now - queued);
	if (st)
		st->matched++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
