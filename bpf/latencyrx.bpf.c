//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Receive-stack latency: how long a received packet takes from the kernel's
 * own receive timestamp to its socket's receive queue ("stack"), and from
 * there to the application's read ("read"), for TCP and UDP.
 *
 * Arrival is skb->tstamp, the software RX timestamp the kernel takes as the
 * packet enters the stack (CLOCK_REALTIME) while any socket on the host asked
 * for RX timestamps: user space holds one open for as long as the programs
 * are attached (netstacklat's shape). So no program runs on every packet at
 * netif_receive_skb; the programs run only where a packet reaches a socket
 * or is read, compare the stamp with the real-time clock (CLOCK_TAI less the
 * TAI offset user space keeps in tai_offset_ns: bpf_ktime_get_tai_ns() is the
 * real-time clock BPF can read), and file the difference in a per-CPU array
 * histogram: no hash map, no helper but the clock, no counter (the
 * histogram's bucket counts the packet).
 *
 * The queue time, kept for the read, is the work netstacklat does not do,
 * so it is kept for a sample only (read_sample_mask: 1 in 16 by default):
 * TCP segments by a hash of their stamp, UDP sockets by a salted hash of
 * their addresses and ports. The arrival-to-socket histograms sample
 * packets at the same rate by the same hash of the stamp (for TCP the
 * very segments whose queue time is kept): NBS's log-linear histogram
 * spreads over more cache lines than netstacklat's log2 one, and a segment
 * out of the sample leaves tcp_probe before the clock and the histogram.
 * The read and total histograms count the read sample.
 *
 * A TCP packet that crossed a veth or was forwarded carries its sender's
 * monotonic departure time until ip_local_deliver replaces it with a
 * real-time stamp, before any of these hooks; a packet without a stamp is
 * counted, never timed.
 *
 * With --netns every program's first test is the namespace: a packet of
 * another namespace costs one compare, and the programs count the runs in
 * scope (runs[]) so the agent charges the source for its own work; without
 * it they count nothing (every run is in scope; the kernel counts runs).
 *
 * Where the packet reaches its socket:
 *  - TCP: tp_btf/tcp_probe(sk, skb), at the start of tcp_rcv_established,
 *    after the socket's backlog (so time spent there counts), for segments
 *    with data (end_seq beyond seq in the control block). A sampled queue
 *    time is kept for the read in a direct-mapped table indexed by a hash
 *    of the stamp, and matched by stamp and end_seq at the read, the first
 *    tp_btf/skb_copy_datagram_iovec of that skb. A segment TCP coalesces
 *    into an skb already queued gives that skb its stamp and end_seq: the
 *    read is timed once, from the newest data's queue time. A sampled read
 *    that finds its slot taken by a newer segment is counted (overwritten).
 *  - UDP: tp_btf/sk_data_ready(sk), right after __udp_enqueue_schedule_skb
 *    appended the datagram: it is the tail of sk_receive_queue. UDP copies
 *    linear datagrams without skb_copy_datagram_iovec, so the read is
 *    tp_btf/sock_recv_length at the end of recvmsg, which takes exactly the
 *    oldest datagram: the last 32 queue times of a sampled socket
 *    (socket-local storage), by position, pair them, counted back from the
 *    datagrams still waiting.
 */
#include "nbs.h"
#include "loglinear.h"

/* The programs' knobs share one cache line (.data, with the clock offset
 * every run reads) rather than two (.rodata and .data): on a host busy
 * receiving, every extra line a run touches is a likely cache miss, and a
 * compare on target_netns costs less than that. */
/* 0 = every namespace */
volatile __u32 target_netns SEC(".data") = 0;
/* The queue time is kept for 1 in read_sample_mask + 1 TCP segments (by a
 * hash of the RX stamp) and UDP sockets (by a hash of their addresses), so the
 * read and total histograms are a sample of that rate; the arrival-to-socket
 * ("stack") histograms sample packets at the same rate by the stamp's hash.
 * Keeping the queue time is what costs beyond netstacklat's work (a slot
 * write, a socket-storage lookup), and filing a time in the log-linear
 * histogram touches more lines than netstacklat's, so only the sample pays
 * them; the rest of TCP's segments leave at a multiply and a test.
 * A power of two less one; 0: all. */
volatile __u32 read_sample_mask SEC(".data") = 0;
/* Random, set by user space at load: which UDP sockets are sampled. */
volatile __u64 read_sample_salt SEC(".data") = 0;
/* Bumped by user space before each attach: entries of an earlier
 * attachment are never matched, so nothing is timed across a gap. */
volatile __u32 epoch SEC(".data") = 1;
/* CLOCK_TAI - CLOCK_REALTIME, set by user space at load and at every
 * collection (it changes only with a leap second). */
volatile __s64 tai_offset_ns SEC(".data") = 0;

#define NBS_IPPROTO_TCP 6
#define NBS_IPPROTO_UDP 17
#define NBS_MSG_PEEK 2
#define NBS_MSG_ERRQUEUE 0x2000
#define NBS_TCPHDR_FIN 0x01

enum nbs_rx_proto { NBS_RX_TCP, NBS_RX_UDP, NBS_RX_PROTOS };
enum nbs_rx_kind { NBS_RX_STACK, NBS_RX_READ, NBS_RX_TOTAL, NBS_RX_KINDS };
/* The programs, for their runs in scope. */
enum nbs_rx_hook { NBS_RX_HOOK_TCP, NBS_RX_HOOK_COPY, NBS_RX_HOOK_READY, NBS_RX_HOOK_RECV, NBS_RX_HOOKS };

#define NBS_RX_SLOTS_BITS 8
#define NBS_RX_SLOTS (1 << NBS_RX_SLOTS_BITS)
#define NBS_RX_FIFO 32 /* power of two */

/* A sampled TCP segment queued and not yet read: 32 bytes, two to a cache
 * line; 256 of them (8 KiB) stay in cache (8192 did not: tcp_probe 142 ->
 * 111 ns/run at 1024 in bench/latencyrx) and, 1 in 16 segments sampled,
 * cover about 4096 data skbs waiting in the namespace's receive queues. */
struct nbs_rx_slot {
	__u64 tstamp;    /* its RX stamp; 0: free */
	__u64 queued_ns; /* 0: read already */
	__u32 end_seq;
	__u32 epoch;
	__u64 pad;
};

/* One queued datagram of a UDP socket: seq is its position + 1 (0: empty
 * or paired already). */
struct nbs_rx_fifo_ent {
	__u64 seq;
	__u64 queued_ns;
	__u64 arrived_ns; /* 0 when it had no RX stamp */
	__u64 epoch;
};

/* The last NBS_RX_FIFO datagrams queued to a UDP socket, by position. */
struct nbs_rx_fifo {
	__u64 pushed;
	struct nbs_rx_fifo_ent ent[NBS_RX_FIFO];
};

struct nbs_rx_stats {
	/* per program: runs in scope (past the namespace test), counted only
	 * with target_netns (without, every run is in scope: the kernel's
	 * run count says it) */
	__u64 runs[NBS_RX_HOOKS];
	/* Timed counts are the histograms' counts: no counter on the path
	 * every packet takes. */
	__u64 sampled[2];         /* per protocol: queue times kept (TCP segments, UDP datagrams) */
	__u64 unstamped;          /* reached a socket without a real-time RX stamp */
	__u64 overwritten;        /* sampled TCP reads whose slot a newer segment took */
	__u64 udp_unpaired;       /* UDP reads whose queue time was not found */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NBS_RX_SLOTS);
	__type(key, __u32);
	__type(value, struct nbs_rx_slot);
} rx_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nbs_rx_fifo);
} rx_fifo SEC(".maps");

/* Index proto * NBS_RX_KINDS + kind. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NBS_RX_PROTOS * NBS_RX_KINDS);
	__type(key, __u32);
	__type(value, struct nbs_hist);
} rx_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nbs_rx_stats);
} rx_stats SEC(".maps");

/* Adds one to the counter at byte offset off of this CPU's stats. Only
 * off the common path: a packet that is timed and not sampled touches no
 * counter (its histogram bucket counts it). */
static __always_inline void count(__u32 off)
{
	__u32 zero = 0;
	void *st = bpf_map_lookup_elem(&rx_stats, &zero);

	if (st)
		(*(__u64 *)(st + off))++;
}

static __always_inline void record(__u32 proto, __u32 kind, __u64 ns)
{
	__u32 k = proto * NBS_RX_KINDS + kind;
	struct nbs_hist *h = bpf_map_lookup_elem(&rx_hist, &k);

	if (h)
		nbs_hist_record(h, ns);
}

/* The real-time clock, in skb->tstamp's terms. */
static __always_inline __u64 now_real(void)
{
	return bpf_ktime_get_tai_ns() - tai_offset_ns;
}

/* skb's real-time RX stamp, 0 when it has none (timestamps off). Where the
 * programs read it, past ip_local_deliver_finish / ip6_input_finish, a
 * sender's monotonic or TAI delivery time has been replaced already
 * (skb_clear_delivery_time), so tstamp_type needs no test. */
static __always_inline __u64 rx_stamp(const struct sk_buff *skb)
{
	return skb->tstamp;
}

static __always_inline bool in_scope(const struct sock *sk)
{
	return !target_netns || nbs_sk_netns(sk) == target_netns;
}

/* A run in scope, counted only when the namespace test can fail: a
 * constant the verifier folds, so unrestricted programs carry no store. */
static __always_inline void count_run(int hook)
{
	if (target_netns)
		count(offsetof(struct nbs_rx_stats, runs[0]) + hook * sizeof(__u64));
}

/* The multiplicative hash both the slot and the sample come from. */
static __always_inline __u64 mix(__u64 v)
{
	return v * 0x9E3779B97F4A7C15ULL;
}

/* Whether hash h is in the 1-in-(read_sample_mask + 1) sample: bits below
 * the slot index, so the sampled stamps still spread over every slot. */
static __always_inline bool sampled(__u64 h)
{
	return !((__u32)(h >> 32) & read_sample_mask);
}

/* Whether a UDP socket is in the read sample: by its addresses, ports and
 * port hashes, the first line of struct sock, which the lookup that found
 * the socket has just read (its inode, sk_ino, is a line the receive path
 * does not otherwise touch), salted by user space at
 * each load so a service out of the sample is not out of it forever. A
 * SO_REUSEPORT group bound to one address is in or out as one. */
static __always_inline bool sk_sampled(const struct sock *sk)
{
	if (!read_sample_mask)
		return true;
	return sampled(mix(sk->__sk_common.skc_addrpair ^ read_sample_salt ^
			   ((__u64)sk->__sk_common.skc_hash << 32 | sk->__sk_common.skc_portpair)));
}

static __always_inline const struct tcp_skb_cb *tcp_cb(const struct sk_buff *skb)
{
	return (const struct tcp_skb_cb *)skb->cb;
}

static __always_inline struct nbs_rx_slot *slot_of(__u64 h)
{
	__u32 k = h >> (64 - NBS_RX_SLOTS_BITS);

	return bpf_map_lookup_elem(&rx_slots, &k);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(nbs_rx_tcp, struct sock *sk, const struct sk_buff *skb)
{
	const struct tcp_skb_cb *cb = tcp_cb(skb);
	struct nbs_rx_slot *s;
	__u64 ts, now, h;
	__u32 end_seq, len;

	if (!in_scope(sk))
		return 0;
	count_run(NBS_RX_HOOK_TCP);
	/* Data segments only: a pure ACK is never read. */
	end_seq = cb->end_seq;
	len = end_seq - cb->seq - (cb->tcp_flags & NBS_TCPHDR_FIN);
	if ((__s32)len <= 0)
		return 0;
	ts = rx_stamp(skb);
	if (!ts) {
		count(offsetof(struct nbs_rx_stats, unstamped));
		return 0;
	}
	/* The sample first: a segment out of it leaves at a multiply and a
	 * test, before the clock and the histogram (the bucket's cache line
	 * is the cost netstacklat's coarser histogram does not pay). */
	h = mix(ts);
	if (!sampled(h))
		return 0;
	now = now_real();
	if (now < ts)
		return 0;
	record(NBS_RX_TCP, NBS_RX_STACK, now - ts);
	s = slot_of(h);
	if (!s)
		return 0;
	count(offsetof(struct nbs_rx_stats, sampled[NBS_RX_TCP]));
	/* Stores only: reading the slot (to count what this overwrites) would
	 * wait for its cache line; the read counts what it did not find. */
	s->tstamp = ts;
	s->queued_ns = now;
	s->end_seq = end_seq;
	s->epoch = epoch;
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(nbs_rx_copy, const struct sk_buff *skb, int len)
{
	const struct sock *sk = skb->sk;
	struct nbs_rx_slot *s;
	__u64 ts, now, h, q;

	if (!in_scope(sk))
		return 0;
	count_run(NBS_RX_HOOK_COPY);
	ts = skb->tstamp;
	if (!ts)
		return 0;
	/* Out of the sample: nothing kept to match, and no map touched. */
	h = mix(ts);
	if (!sampled(h))
		return 0;
	s = slot_of(h);
	if (!s)
		return 0;
	/* Stamp and end_seq: another protocol's skb (UDP, whose reads are
	 * timed at sock_recv_length) never matches. */
	if (s->tstamp != ts || s->end_seq != tcp_cb(skb)->end_seq || s->epoch != epoch) {
		/* A sampled TCP segment whose queue time is gone: a newer one
		 * took its slot, or it was queued before this attachment. */
		if (s->tstamp != ts && sk && sk->sk_protocol == NBS_IPPROTO_TCP)
			count(offsetof(struct nbs_rx_stats, overwritten));
		return 0;
	}
	if (!s->queued_ns)
		return 0; /* read already: the rest of the skb follows */
	q = s->queued_ns;
	s->queued_ns = 0; /* the first copy is the read */
	now = now_real();
	if (now < q)
		return 0;
	record(NBS_RX_TCP, NBS_RX_READ, now - q);
	record(NBS_RX_TCP, NBS_RX_TOTAL, now - ts);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(nbs_rx_ready, const struct sock *sk)
{
	struct nbs_rx_fifo_ent *e;
	struct nbs_rx_fifo *f;
	struct sk_buff *tail;
	__u64 now, seq, arrived = 0;
	bool keep, timed;

	if (!in_scope(sk))
		return 0;
	count_run(NBS_RX_HOOK_READY);
	if (sk->sk_protocol != NBS_IPPROTO_UDP)
		return 0;
	tail = sk->sk_receive_queue.prev;
	/* An empty queue: the reader took the datagram already. It still
	 * takes a position, so the ones after it keep theirs. */
	if (tail && (void *)tail != (void *)&sk->sk_receive_queue) {
		arrived = rx_stamp(tail);
		if (!arrived)
			count(offsetof(struct nbs_rx_stats, unstamped));
	}
	/* The same 1 in N by stamp as TCP's, so the two weigh alike in
	 * latency/rx/stack, which merges them; a socket out of the read
	 * sample keeps no queue times. A datagram in neither leaves before
	 * the clock. */
	keep = sk_sampled(sk);
	timed = arrived && sampled(mix(arrived));
	if (!keep && !timed)
		return 0;
	now = now_real();
	if (now < arrived)
		arrived = 0;
	else if (timed)
		record(NBS_RX_UDP, NBS_RX_STACK, now - arrived);
	if (!keep)
		return 0;
	f = bpf_sk_storage_get(&rx_fifo, (struct sock *)sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!f)
		return 0;
	count(offsetof(struct nbs_rx_stats, sampled[NBS_RX_UDP]));
	seq = __sync_fetch_and_add(&f->pushed, 1);
	e = &f->ent[seq & (NBS_RX_FIFO - 1)];
	e->queued_ns = now;
	e->arrived_ns = arrived;
	e->epoch = epoch;
	e->seq = seq + 1;
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(nbs_rx_recv, struct sock *sk, int ret, int flags)
{
	struct nbs_rx_fifo_ent *e;
	struct nbs_rx_fifo *f;
	__u64 now, seq, pushed, q, a;
	__u32 waiting;

	if (!in_scope(sk))
		return 0;
	count_run(NBS_RX_HOOK_RECV);
	if (ret < 0 || (flags & (NBS_MSG_PEEK | NBS_MSG_ERRQUEUE)) || sk->sk_protocol != NBS_IPPROTO_UDP)
		return 0;
	if (!sk_sampled(sk))
		return 0;
	f = bpf_sk_storage_get(&rx_fifo, sk, NULL, 0);
	if (!f)
		return 0;
	/* The datagram just read is the oldest; those still waiting (in the
	 * receive queue and the reader queue UDP splices it into) are the
	 * newest pushed. Counting from the end keeps the pairing right
	 * whatever was read while the programs were detached. */
	waiting = sk->sk_receive_queue.qlen + BPF_CORE_READ((struct udp_sock *)sk, reader_queue.qlen);
	pushed = f->pushed;
	if (pushed < (__u64)waiting + 1)
		return 0;
	seq = pushed - waiting - 1;
	e = &f->ent[seq & (NBS_RX_FIFO - 1)];
	if (e->seq != seq + 1 || e->epoch != epoch) {
		/* Overwritten (more than NBS_RX_FIFO waiting), queued before
		 * this attachment, or still being pushed. */
		count(offsetof(struct nbs_rx_stats, udp_unpaired));
		return 0;
	}
	q = e->queued_ns;
	a = e->arrived_ns;
	e->seq = 0; /* paired once */
	now = now_real();
	if (now < q)
		return 0;
	record(NBS_RX_UDP, NBS_RX_READ, now - q);
	if (a && now >= a)
		record(NBS_RX_UDP, NBS_RX_TOTAL, now - a);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
