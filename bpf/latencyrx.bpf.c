//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Receive-stack latency: how long a received packet takes from the device
 * (netif_receive_skb) to its socket's receive queue ("stack"), and from
 * there to the application's read ("read"), for TCP and UDP.
 *
 * Arrival is the program's own stamp at tp_btf/netif_receive_skb, not
 * skb->tstamp: the kernel fills that only while some socket on the host
 * asked for RX timestamps (netstacklat turns them on host-wide), in
 * CLOCK_REALTIME, and a TCP packet that crossed a veth or was forwarded
 * still carries its sender's monotonic departure time there
 * (docs/kernel.md, "Receive-stack latency").
 *
 * The stamp is kept in a direct-mapped table indexed by a hash of the skb's
 * data head: an array slot is a few stores, where an LRU hash insert costs
 * hundreds of nanoseconds on every packet. A slot holds the head's address,
 * so a colliding slot never matches another packet (the skb's own address
 * cannot be stored: the verifier keeps pointers out of map values); an
 * overwritten one is a lost sample, counted as unmatched.
 *
 * Where the packet reaches its socket:
 *  - TCP: tp_btf/tcp_probe(sk, skb), at the start of tcp_rcv_established,
 *    after the socket's backlog (so time spent there counts), for segments
 *    with data. The read is the first tp_btf/skb_copy_datagram_iovec of that
 *    skb. Segments coalesced into an skb already queued are read with it:
 *    their read is counted once, from the oldest data's arrival.
 *  - UDP: tp_btf/sk_data_ready(sk), right after __udp_enqueue_schedule_skb
 *    appended the datagram: it is the tail of sk_receive_queue. UDP copies
 *    linear datagrams without skb_copy_datagram_iovec, so the read is
 *    tp_btf/sock_recv_length at the end of recvmsg, which takes exactly the
 *    oldest datagram: the last 32 queue times per socket (socket-local
 *    storage), by position, pair them, counted back from the datagrams
 *    still waiting.
 */
#include "nbs.h"
#include "loglinear.h"

const volatile __u32 target_netns = 0; /* 0 = every namespace */
/* Bumped by user space before each attach: entries of an earlier
 * attachment are never matched, so nothing is timed across a gap. */
volatile __u32 epoch = 1;

#define NBS_IPPROTO_TCP 6
#define NBS_IPPROTO_UDP 17
#define NBS_MSG_PEEK 2
#define NBS_MSG_ERRQUEUE 0x2000

enum nbs_rx_proto { NBS_RX_TCP, NBS_RX_UDP, NBS_RX_PROTOS };
enum nbs_rx_kind { NBS_RX_STACK, NBS_RX_READ, NBS_RX_TOTAL, NBS_RX_KINDS };

#define NBS_RX_SLOTS_BITS 13
#define NBS_RX_SLOTS (1 << NBS_RX_SLOTS_BITS)
#define NBS_RX_FIFO 32 /* power of two */

struct nbs_rx_slot {
	__u64 head; /* 0: free */
	__u64 arrived_ns;
	__u64 queued_ns; /* 0 until it reached its socket */
	__u32 epoch;
	__u32 proto; /* enum nbs_rx_proto, once queued */
};

/* One queued datagram of a UDP socket: seq is its position + 1 (0: empty
 * or paired already). */
struct nbs_rx_fifo_ent {
	__u64 seq;
	__u64 queued_ns;
	__u64 arrived_ns; /* 0 when its arrival was not seen */
	__u64 epoch;
};

/* The last NBS_RX_FIFO datagrams queued to a UDP socket, by position. */
struct nbs_rx_fifo {
	__u64 pushed;
	struct nbs_rx_fifo_ent ent[NBS_RX_FIFO];
};

struct nbs_rx_stats {
	__u64 arrived;        /* packets stamped at netif_receive_skb */
	__u64 stack[2];       /* per protocol: timed to the socket */
	__u64 read[2];        /* per protocol: timed to the read */
	__u64 unmatched;      /* reached a socket with no stamp (overwritten, or not seen) */
	__u64 udp_unpaired;   /* UDP reads whose queue time was not found */
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

static __always_inline struct nbs_rx_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&rx_stats, &zero);
}

static __always_inline void record(__u32 proto, __u32 kind, __u64 ns)
{
	__u32 k = proto * NBS_RX_KINDS + kind;
	struct nbs_hist *h = bpf_map_lookup_elem(&rx_hist, &k);

	if (h)
		nbs_hist_record(h, ns);
}

/* The slot of skb, by Fibonacci hashing of its data head's address: as
 * unique as the skb's while the packet lives, and its low bits say little.
 * The head comes back in *head. */
static __always_inline struct nbs_rx_slot *slot_of(const struct sk_buff *skb, __u64 *head)
{
	__u32 k;

	/* Read as a number: the verifier allows no arithmetic on the skb
	 * pointer, nor on the one a direct load of skb->head gives. */
	if (bpf_probe_read_kernel(head, sizeof(*head), &skb->head) || !*head)
		return NULL;
	k = (*head * 0x9E3779B97F4A7C15ULL) >> (64 - NBS_RX_SLOTS_BITS);
	return bpf_map_lookup_elem(&rx_slots, &k);
}

/* The slot holding skb's arrival in this attachment, or NULL. */
static __always_inline struct nbs_rx_slot *slot_match(const struct sk_buff *skb)
{
	__u64 head;
	struct nbs_rx_slot *s = slot_of(skb, &head);

	if (!s || s->head != head || s->epoch != epoch)
		return NULL;
	return s;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(nbs_rx_arrive, struct sk_buff *skb)
{
	struct nbs_rx_stats *st;
	struct nbs_rx_slot *s;
	__u64 head;

	if (target_netns && skb->dev->nd_net.net->ns.inum != target_netns)
		return 0;
	s = slot_of(skb, &head);
	if (!s)
		return 0;
	s->head = head;
	s->arrived_ns = bpf_ktime_get_ns();
	s->queued_ns = 0;
	s->epoch = epoch;
	st = stats();
	if (st)
		st->arrived++;
	return 0;
}

/* The packet reached its socket: time the stack, and keep the queue time
 * for the read. Returns the arrival, 0 when it was not seen. */
static __always_inline __u64 queued(const struct sk_buff *skb, __u32 proto, __u64 now)
{
	struct nbs_rx_stats *st = stats();
	struct nbs_rx_slot *s = slot_match(skb);
	__u64 arrived;

	if (!s || s->queued_ns) {
		if (st)
			st->unmatched++;
		return 0;
	}
	arrived = s->arrived_ns;
	if (now < arrived)
		return 0;
	s->queued_ns = now;
	s->proto = proto;
	record(proto, NBS_RX_STACK, now - arrived);
	if (st)
		st->stack[proto & 1]++;
	return arrived;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(nbs_rx_tcp, struct sock *sk, const struct sk_buff *skb)
{
	__u8 doff;

	/* Out of scope, a stale slot (a packet that never reached a socket)
	 * could match another namespace's packet reusing its memory. */
	if (target_netns && nbs_sk_netns(sk) != target_netns)
		return 0;
	/* Data segments only: a pure ACK is never read. The header is at
	 * skb->data in tcp_rcv_established. */
	if (bpf_probe_read_kernel(&doff, 1, skb->data + 12))
		return 0;
	if (skb->len <= (__u32)(doff >> 4) * 4)
		return 0;
	queued(skb, NBS_RX_TCP, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(nbs_rx_copy, const struct sk_buff *skb, int len)
{
	struct nbs_rx_stats *st;
	struct nbs_rx_slot *s = slot_match(skb);
	__u64 now;

	/* UDP datagrams are timed at sock_recv_length, linear or not. */
	if (!s || !s->queued_ns || s->proto != NBS_RX_TCP)
		return 0;
	/* A queued skb freed unread leaves its slot: only a reader in scope
	 * may match it (TCP receive skbs are owned by their socket). */
	if (target_netns && nbs_sk_netns(skb->sk) != target_netns)
		return 0;
	now = bpf_ktime_get_ns();
	if (now >= s->queued_ns) {
		record(NBS_RX_TCP, NBS_RX_READ, now - s->queued_ns);
		record(NBS_RX_TCP, NBS_RX_TOTAL, now - s->arrived_ns);
		st = stats();
		if (st)
			st->read[NBS_RX_TCP]++;
	}
	s->head = 0; /* the first copy is the read; the rest of the skb follows */
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(nbs_rx_ready, const struct sock *sk)
{
	struct nbs_rx_fifo_ent *e;
	struct nbs_rx_fifo *f;
	struct sk_buff *tail;
	__u64 now, seq, arrived = 0;

	if (sk->sk_protocol != NBS_IPPROTO_UDP)
		return 0;
	if (target_netns && nbs_sk_netns(sk) != target_netns)
		return 0;
	now = bpf_ktime_get_ns();
	tail = sk->sk_receive_queue.prev;
	/* An empty queue: the reader took the datagram already. It still
	 * takes a position, so the ones after it keep theirs. */
	if (tail && (void *)tail != (void *)&sk->sk_receive_queue)
		arrived = queued(tail, NBS_RX_UDP, now);
	f = bpf_sk_storage_get(&rx_fifo, (struct sock *)sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!f)
		return 0;
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
	struct nbs_rx_stats *st;
	struct nbs_rx_fifo_ent *e;
	struct nbs_rx_fifo *f;
	__u64 now, seq, pushed, q, a;
	__u32 waiting;

	if (ret < 0 || (flags & (NBS_MSG_PEEK | NBS_MSG_ERRQUEUE)) || sk->sk_protocol != NBS_IPPROTO_UDP)
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
	st = stats();
	if (e->seq != seq + 1 || e->epoch != epoch) {
		/* Overwritten (more than NBS_RX_FIFO waiting), queued before
		 * this attachment, or still being pushed. */
		if (st)
			st->udp_unpaired++;
		return 0;
	}
	q = e->queued_ns;
	a = e->arrived_ns;
	e->seq = 0; /* paired once */
	now = bpf_ktime_get_ns();
	if (now < q)
		return 0;
	record(NBS_RX_UDP, NBS_RX_READ, now - q);
	if (a && now >= a)
		record(NBS_RX_UDP, NBS_RX_TOTAL, now - a);
	if (st)
		st->read[NBS_RX_UDP]++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
