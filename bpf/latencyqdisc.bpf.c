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

/* In flight: a direct-mapped table of slots, indexed by a hash of the skb's
 * data buffer (skb->head), each holding the packet's tag and when it was
 * queued. A hash map did the same at 250-290 ns a packet on each side (a
 * bucket lock, an LRU list, a delete at the driver); a slot is a store and a
 * load (BENCHMARKS.md, "The agent"). The buffer's address, not the skb's:
 * the verifier allows no arithmetic on the trusted skb pointer, so its
 * address took a bpf_probe_read_kernel of the tracepoint's argument on each
 * side, while head is a plain number read from the skb, whose line is in
 * cache. The tag mixes head with the attachment's epoch, so nothing queued
 * before a Detach is timed after the next Attach. A buffer freed with its
 * packet dropped in the qdisc (never reaching the driver) and reused by a
 * new packet: the new packet's queue takes the slot again, and a packet
 * that reaches the driver without passing net_dev_queue (a qdisc bypass)
 * of another namespace is refused at the driver by its device's namespace.
 * Two packets in flight at once in one slot (two buffers hashed alike, or
 * two clones of one buffer, which TCP does not send while one is still
 * queued): the later one wins, the earlier is not timed and is counted
 * (overwritten). */
#define NBS_QDISC_SLOTS_BITS 17
struct nbs_qdisc_slot {
	__u64 tag; /* 0: free */
	__u64 queued_ns;
};

/* Devices get a histogram each: an index into the per-CPU array qd_hist,
 * handed out in order on a device's first packet, for good (a device
 * table that fills counts dev_full, as a full hash map did). The index is
 * found per packet in a small per-CPU cache of recent devices in the stats
 * (a line the packet touches anyway), before the hash map qd_devs: a
 * histogram in a per-CPU hash map cost a hash lookup per packet. */
#define NBS_QDISC_DEVS 256
#define NBS_QDISC_CACHE_BITS 3

struct nbs_qdisc_dev_info {
	__u8 name[16]; /* NUL-terminated */
	__u32 index;   /* its histogram in qd_hist */
	__u32 pad;
};

struct nbs_qdisc_cached {
	__u64 dev;   /* netns << 32 | ifindex; 0: empty */
	__u64 index; /* its histogram in qd_hist */
};

struct nbs_qdisc_stats {
	/* Not counts: the packet this CPU queued last to a device without a
	 * qdisc (see "direct" below), next to the counters both sides touch. */
	__u64 direct_tag;
	__u64 direct_ns;
	__u64 direct_dev; /* its device (an address, as a number) */
	__u64 queued;      /* packets entering dev_queue_xmit in scope */
	__u64 matched;     /* of which timed to the driver */
	__u64 dev_full;    /* not counted: the device table is full */
	__u64 stale;       /* a clock step between queue and driver */
	__u64 overwritten; /* a slot taken from a packet not (yet) seen at the driver */
	__u64 direct;      /* of matched, timed without a slot (no qdisc) */
	/* Not counts: this CPU's recent devices (dev_hist). */
	struct nbs_qdisc_cached cache[1 << NBS_QDISC_CACHE_BITS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << NBS_QDISC_SLOTS_BITS);
	__type(key, __u32);
	__type(value, struct nbs_qdisc_slot);
} qd_slots SEC(".maps");

/* A device without a qdisc (noqueue: veth, bridges, tunnels, most pods'
 * interfaces) hands a packet to its driver right after net_dev_queue, on
 * the same CPU, with no other packet in between (__dev_queue_xmit: BHs off,
 * then validate_xmit_skb and the TX lock): such a packet is kept in its
 * CPU's stats line, which both sides touch anyway, not in a slot of the
 * table, a line of its own. The entry names its device, so a packet that
 * was dropped or segmented before the driver (and whose buffer may come
 * back to another device's packet) is never matched elsewhere; the next
 * packet overwrites it (counted). */

/* Bumped by user space before each Attach (Probe.BeforeAttach). */
volatile __u32 epoch SEC(".data") = 1;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NBS_QDISC_DEVS);
	__type(key, __u32);
	__type(value, struct nbs_hist);
} qd_hist SEC(".maps");

/* The next histogram index to hand out. */
__u32 next_dev SEC(".bss");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NBS_QDISC_DEVS);
	__type(key, struct nbs_qdisc_dev);
	__type(value, struct nbs_qdisc_dev_info);
} qd_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_qdisc_stats);
} qd_stats SEC(".maps");

static __always_inline struct nbs_qdisc_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&qd_stats, &zero);
}

static __always_inline __u64 mix(__u64 v)
{
	return v * 0x9E3779B97F4A7C15ULL;
}

/* The histogram of device dev in namespace netns: from this CPU's cache of
 * recent devices, else from the device table, which the device's first
 * packet enters (named, and given the next free histogram). */
static __always_inline struct nbs_hist *dev_hist(struct nbs_qdisc_stats *st, const struct net_device *dev,
						 __u32 netns)
{
	struct nbs_qdisc_dev k = {.netns = netns, .ifindex = dev->ifindex};
	__u64 key = (__u64)netns << 32 | k.ifindex;
	struct nbs_qdisc_dev_info *found, info = {};
	struct nbs_qdisc_cached *c;
	__u32 index;

	c = &st->cache[mix(key) >> (64 - NBS_QDISC_CACHE_BITS)];
	if (c->dev == key) {
		index = c->index;
		return bpf_map_lookup_elem(&qd_hist, &index);
	}
	found = bpf_map_lookup_elem(&qd_devs, &k);
	if (!found) {
		/* First packet of this device. Two CPUs that meet it at once
		 * both take an index; the one whose entry lands wins, the
		 * other's index stays unused. */
		info.index = __sync_fetch_and_add(&next_dev, 1);
		if (info.index >= NBS_QDISC_DEVS)
			return NULL;
		bpf_probe_read_kernel_str(info.name, sizeof(info.name), dev->name);
		bpf_map_update_elem(&qd_devs, &k, &info, BPF_NOEXIST);
		found = bpf_map_lookup_elem(&qd_devs, &k);
		if (!found)
			return NULL;
	}
	index = found->index;
	c->dev = key;
	c->index = index;
	return bpf_map_lookup_elem(&qd_hist, &index);
}

/* A packet's buffer address as a number, negated (as good a key). The
 * verifier types skb->head as read-only untrusted memory, and a multiply
 * or shift keeps that type, which cannot be spilled in part (the 32-bit
 * map key); a negation (allowed to a privileged loader) makes it a plain
 * number. In assembly, so the compiler does not fold it into the hash. */
static __always_inline __u64 head_of(const struct sk_buff *skb)
{
	__u64 h = (__u64)skb->head;

	asm volatile("%[h] = -%[h]" : [h] "+r"(h));
	return h;
}

/* A device's address as a number, negated likewise (only ever compared). */
static __always_inline __u64 dev_id(const struct net_device *dev)
{
	__u64 d = (__u64)dev;

	asm volatile("%[d] = -%[d]" : [d] "+r"(d));
	return d;
}

/* Whether the device the packet is queued to has no qdisc: its TX queue's
 * qdisc has no enqueue (__dev_queue_xmit tests the same right after the
 * tracepoint). Only queue 0 is looked at (the verifier allows no index
 * into the device's queue array); a packet of another queue takes the
 * table, which is always right. */
static __always_inline bool noqueue(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!dev || skb->queue_mapping)
		return false;
	return dev->_tx && dev->_tx->qdisc && !dev->_tx->qdisc->enqueue;
}

/* A packet's tag: its buffer and the attachment, never 0. */
static __always_inline __u64 tag_of(__u64 head)
{
	return mix(head ^ ((__u64)epoch << 48)) | 1;
}

static __always_inline struct nbs_qdisc_slot *slot_of(__u64 head)
{
	__u32 k = mix(head) >> (64 - NBS_QDISC_SLOTS_BITS);

	return bpf_map_lookup_elem(&qd_slots, &k);
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(nbs_qdisc_queue, struct sk_buff *skb)
{
	const struct net_device *dev = skb->dev;
	struct nbs_qdisc_stats *st;
	struct nbs_qdisc_slot *s;
	__u64 head;

	if (target_netns && nbs_skb_netns(skb) != target_netns)
		return 0;
	st = stats();
	if (!st)
		return 0;
	head = head_of(skb);
	st->queued++;
	if (noqueue(skb, dev)) {
		if (st->direct_tag)
			st->overwritten++;
		st->direct_ns = bpf_ktime_get_ns();
		st->direct_tag = tag_of(head);
		st->direct_dev = dev_id(dev);
		return 0;
	}
	s = slot_of(head);
	if (!s)
		return 0;
	/* The line is about to be written: reading it first costs nothing. */
	if (s->tag)
		st->overwritten++;
	s->queued_ns = bpf_ktime_get_ns();
	s->tag = tag_of(head);
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(nbs_qdisc_xmit, const struct sk_buff *skb, const struct net_device *dev)
{
	struct nbs_qdisc_stats *st;
	struct nbs_qdisc_slot *s;
	struct nbs_hist *h;
	__u64 now, queued, tag = tag_of(head_of(skb));

	st = stats();
	if (!st)
		return 0;
	if (st->direct_tag == tag && st->direct_dev == dev_id(dev)) {
		queued = st->direct_ns;
		st->direct_tag = 0;
		st->direct++;
	} else {
		s = slot_of(head_of(skb));
		if (!s || s->tag != tag)
			return 0;
		queued = s->queued_ns;
		s->tag = 0;
	}
	/* A dropped skb's memory, head included, can be reused for another
	 * namespace's packet: never time a device outside the scope. */
	if (target_netns && dev->nd_net.net->ns.inum != target_netns)
		return 0;
	now = bpf_ktime_get_ns();
	if (now < queued) {
		st->stale++;
		return 0;
	}
	h = dev_hist(st, dev, dev->nd_net.net->ns.inum);
	if (!h) {
		st->dev_full++;
		return 0;
	}
	nbs_hist_record(h, now - queued);
	st->matched++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
