//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Sampled BPF TX timestamping: where the host spends the time between an
 * application's send and the peer's ACK, for 1 in sample_every TCP
 * connections.
 *
 *   sendmsg ──▶ SCHED (dev_queue_xmit) ──▶ SND_SW (driver) ──▶ ACK
 *      sendmsg_to_qdisc    qdisc_to_driver       driver_to_ack
 *
 * A cgroup sockops program picks connections when they are established and
 * turns on SK_BPF_CB_TX_TIMESTAMPING for them only; every other socket pays
 * nothing after the handshake. For a sampled socket, TSTAMP_SENDMSG_CB tags
 * the skb holding the end of each write (bpf_sock_ops_enable_tx_tstamp) and
 * the kernel then calls back at SCHED, SND_SW and ACK, keyed by the skb's
 * tskey (the sequence number of its last byte).
 *
 * The start of each write comes from tp_btf/tcp_sendmsg_locked (the selftest
 * uses fentry: docs/kernel.md, "TX timestamping"). In-flight stamps live in
 * the socket's own storage: a few slots per socket, no hash map, nothing to
 * leak when the socket goes away. A write finding every slot busy is simply
 * not sampled.
 *
 * Loaded by agent/probe/latencytx.
 */
#include "nbs.h"
#include "loglinear.h"

#define NBS_SOL_SOCKET 1 /* uapi; vmlinux.h has no macros */
#define NBS_TX_SLOTS 8

extern int bpf_sock_ops_enable_tx_tstamp(struct bpf_sock_ops_kern *skops, __u64 flags) __ksym;
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* Set by the loader before load. */
const volatile __u32 target_netns = 0; /* 0 = every namespace */
const volatile __u32 sample_every = 64; /* time 1 in this many connections; 1 = all */

enum nbs_tx_stage {
	NBS_TX_SENDMSG_TO_QDISC = 0,
	NBS_TX_QDISC_TO_DRIVER = 1,
	NBS_TX_DRIVER_TO_ACK = 2,
	NBS_TX_SENDMSG_TO_DRIVER = 3,
	NBS_TX_STAGES = 4,
};

/* Per-CPU event counts, summed by user space. */
struct nbs_tx_stats {
	__u64 established;    /* connections established in scope */
	__u64 sampled;        /* of which chosen for timestamping */
	__u64 sampled_closed; /* sampled connections that have closed */
	__u64 setup_errors;   /* sampling failed: storage or setsockopt */
	__u64 tagged;         /* writes whose skb was tagged */
	__u64 coalesced;      /* writes appended to an already tagged skb */
	__u64 busy;           /* writes not tagged: every slot in flight */
	__u64 enable_errors;  /* bpf_sock_ops_enable_tx_tstamp failed */
	__u64 sched;          /* first SCHED stamps */
	__u64 sw;             /* first SND_SW stamps */
	__u64 acked;          /* ACKs of skbs stamped at SND_SW */
	__u64 complete;       /* ACKs with all four stamps, in order */
	__u64 restamps;       /* SCHED / SND_SW again: retransmits, not counted */
	__u64 unmatched;      /* stamps for a key with no slot */
	__u64 ack_without_sw; /* ACKed without reaching the driver on record (qdisc drop) */
	__u64 abandoned;      /* slots freed unACKed: skb merged into a later one */
	__u64 out_of_order;   /* a stamp earlier than the one before it */
};

struct nbs_tx_slot {
	__u32 tskey;
	__u32 used;
	__u64 sendmsg_ns;
	__u64 sched_ns;
	__u64 sw_ns;
};

/* Exists only for sampled sockets: its presence is the sampling decision. */
struct nbs_tx_sock {
	__u64 sendmsg_start; /* first copy of the current tcp_sendmsg_locked, 0 if none */
	struct nbs_tx_slot slot[NBS_TX_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nbs_tx_sock);
} tx_sock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NBS_TX_STAGES);
	__type(key, __u32);
	__type(value, struct nbs_hist);
} tx_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_tx_stats);
} tx_stats SEC(".maps");

/*
 * Per-CPU values are updated with plain increments. A sockops program can
 * be interrupted by a softirq running it again on the same CPU (ACK
 * processing from a socket's backlog runs with BHs enabled); the worst that
 * does is lose one count, and an atomic per stamp would cost more than the
 * rest of the program.
 */
static __always_inline struct nbs_tx_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&tx_stats, &zero);
}

static __always_inline void record(__u32 stage, __u64 d)
{
	struct nbs_hist *h = bpf_map_lookup_elem(&tx_hist, &stage);

	if (h)
		nbs_hist_record(h, d);
}

/* TCP sequence order, as the kernel's before(). */
static __always_inline bool seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline int find_slot(struct nbs_tx_sock *s, __u32 tskey)
{
	for (int i = 0; i < NBS_TX_SLOTS; i++)
		if (s->slot[i].used && s->slot[i].tskey == tskey)
			return i;
	return -1;
}

static __always_inline int free_slot(struct nbs_tx_sock *s)
{
	for (int i = 0; i < NBS_TX_SLOTS; i++)
		if (!s->slot[i].used)
			return i;
	return -1;
}

static __always_inline __u32 skb_tskey(const struct sk_buff *skb)
{
	struct skb_shared_info *sh;

	sh = bpf_rdonly_cast(skb->head + skb->end, bpf_core_type_id_kernel(struct skb_shared_info));
	return sh->tskey;
}

/* Connection established: sample it or leave it alone for good. */
static __always_inline void on_established(struct bpf_sock_ops *skops, struct bpf_sock_ops_kern *k,
					   struct nbs_tx_stats *st)
{
	int flags = SK_BPF_CB_TX_TIMESTAMPING;
	struct nbs_tx_sock *s;
	struct bpf_sock *sk;

	if (target_netns && nbs_sk_netns(k->sk) != target_netns)
		return;
	st->established++;
	if (sample_every > 1 && bpf_get_prandom_u32() % sample_every)
		return;
	sk = skops->sk;
	if (!sk)
		return;
	s = bpf_sk_storage_get(&tx_sock, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s) {
		st->setup_errors++;
		return;
	}
	if (bpf_setsockopt(skops, NBS_SOL_SOCKET, SK_BPF_CB_FLAGS, &flags, sizeof(flags))) {
		bpf_sk_storage_delete(&tx_sock, sk);
		st->setup_errors++;
		return;
	}
	/* STATE_CB only to count sampled connections closing. Keep the flags
	 * other programs on this socket asked for. */
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
	st->sampled++;
}

/* End of a write: tag the skb holding its last byte. */
static __always_inline void on_sendmsg(struct bpf_sock_ops_kern *k, struct nbs_tx_sock *s,
				       struct nbs_tx_stats *st, __u64 now)
{
	struct sk_buff *skb = k->skb;
	__u64 start;
	__u32 old;
	int i;

	if (!skb)
		return;
	start = s->sendmsg_start ? s->sendmsg_start : now;
	s->sendmsg_start = 0;
	old = skb_tskey(skb);
	/* Small writes coalesce into one unsent skb, and tagging it again moves
	 * its key to the new last byte: keep the oldest write's start. */
	i = old ? find_slot(s, old) : -1;
	if (i >= 0 && i < NBS_TX_SLOTS) {
		if (bpf_sock_ops_enable_tx_tstamp(k, 0)) {
			st->enable_errors++;
			return;
		}
		s->slot[i].tskey = skb_tskey(skb);
		st->coalesced++;
		return;
	}
	i = free_slot(s);
	if (i < 0 || i >= NBS_TX_SLOTS) {
		st->busy++;
		return;
	}
	if (bpf_sock_ops_enable_tx_tstamp(k, 0)) {
		st->enable_errors++;
		return;
	}
	s->slot[i].tskey = skb_tskey(skb);
	s->slot[i].sendmsg_ns = start;
	s->slot[i].sched_ns = 0;
	s->slot[i].sw_ns = 0;
	s->slot[i].used = 1;
	st->tagged++;
}

/* A later stage of a tagged skb. Only the first SCHED and SND_SW count:
 * a retransmit stamps again. */
static __always_inline void on_stamp(struct bpf_sock_ops_kern *k, struct nbs_tx_sock *s,
				     struct nbs_tx_stats *st, __u32 op, __u64 now)
{
	struct nbs_tx_slot *sl;
	__u32 key;
	int i;

	if (!k->skb)
		return;
	key = skb_tskey(k->skb);
	i = find_slot(s, key);
	if (i < 0 || i >= NBS_TX_SLOTS) {
		st->unmatched++;
		return;
	}
	sl = &s->slot[i];
	switch (op) {
	case BPF_SOCK_OPS_TSTAMP_SCHED_CB:
		if (sl->sched_ns || sl->sw_ns) {
			st->restamps++;
			return;
		}
		if (now < sl->sendmsg_ns) {
			st->out_of_order++;
			return;
		}
		sl->sched_ns = now;
		record(NBS_TX_SENDMSG_TO_QDISC, now - sl->sendmsg_ns);
		st->sched++;
		return;
	case BPF_SOCK_OPS_TSTAMP_SND_SW_CB:
		if (sl->sw_ns) {
			st->restamps++;
			return;
		}
		if (now < sl->sched_ns || now < sl->sendmsg_ns) {
			st->out_of_order++;
			return;
		}
		sl->sw_ns = now;
		if (sl->sched_ns)
			record(NBS_TX_QDISC_TO_DRIVER, now - sl->sched_ns);
		record(NBS_TX_SENDMSG_TO_DRIVER, now - sl->sendmsg_ns);
		st->sw++;
		return;
	case BPF_SOCK_OPS_TSTAMP_ACK_CB:
		if (!sl->sw_ns) {
			st->ack_without_sw++;
		} else if (now < sl->sw_ns) {
			st->out_of_order++;
		} else {
			record(NBS_TX_DRIVER_TO_ACK, now - sl->sw_ns);
			st->acked++;
			if (sl->sched_ns)
				st->complete++;
		}
		sl->used = 0;
		/* ACKs are cumulative: a slot for an earlier key will never be
		 * ACKed (its skb was merged into a later one on retransmit). */
		for (int j = 0; j < NBS_TX_SLOTS; j++) {
			if (s->slot[j].used && seq_before(s->slot[j].tskey, key)) {
				s->slot[j].used = 0;
				st->abandoned++;
			}
		}
		return;
	}
}

SEC("sockops")
int nbs_tx_sockops(struct bpf_sock_ops *skops)
{
	struct bpf_sock_ops_kern *k;
	struct nbs_tx_stats *st;
	struct nbs_tx_sock *s;
	struct bpf_sock *sk;
	__u32 op = skops->op;

	switch (op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		st = stats();
		if (st)
			on_established(skops, bpf_cast_to_kern_ctx(skops), st);
		return 1;
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] != TCP_CLOSE)
			return 1;
		sk = skops->sk;
		if (!sk || !bpf_sk_storage_get(&tx_sock, sk, 0, 0))
			return 1;
		st = stats();
		if (st)
			st->sampled_closed++;
		return 1;
	case BPF_SOCK_OPS_TSTAMP_SENDMSG_CB:
	case BPF_SOCK_OPS_TSTAMP_SCHED_CB:
	case BPF_SOCK_OPS_TSTAMP_SND_SW_CB:
	case BPF_SOCK_OPS_TSTAMP_ACK_CB:
		break;
	default:
		return 1;
	}

	sk = skops->sk;
	if (!sk)
		return 1;
	/* Another program may have turned timestamping on for a socket we did
	 * not sample: no storage, not ours. */
	s = bpf_sk_storage_get(&tx_sock, sk, 0, 0);
	st = stats();
	if (!s || !st)
		return 1;
	k = bpf_cast_to_kern_ctx(skops);
	if (op == BPF_SOCK_OPS_TSTAMP_SENDMSG_CB)
		on_sendmsg(k, s, st, bpf_ktime_get_ns());
	else
		on_stamp(k, s, st, op, bpf_ktime_get_ns());
	return 1;
}

/*
 * Start of a write. The tracepoint fires at the top of each round of
 * tcp_sendmsg_locked's copy loop, under the socket lock; the first round
 * with room to copy starts the clock, SENDMSG_CB stops it. A round that is
 * about to wait for send-buffer space does not start it: a non-blocking
 * socket returns EAGAIN there without copying anything (and no SENDMSG_CB
 * would clear the start), and a blocking one copies only after the wait.
 */
SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(nbs_tx_sendmsg, const struct sock *sk, const struct msghdr *msg, const struct sk_buff *skb,
	     int size_goal)
{
	struct nbs_tx_sock *s;

	if (!(sk->sk_bpf_cb_flags & SK_BPF_CB_TX_TIMESTAMPING))
		return 0;
	s = bpf_sk_storage_get(&tx_sock, (struct sock *)sk, 0, 0);
	if (!s || s->sendmsg_start)
		return 0;
	/* The socket is hot here, the queue's tail skb maybe not: test it last. */
	if (sk->sk_wmem_queued >= sk->sk_sndbuf && (!skb || skb->len >= size_goal))
		return 0;
	s->sendmsg_start = bpf_ktime_get_ns();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
