//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Who talks to whom: TCP connections aggregated per interval into edges
 * (network namespace, role, local address, local port if server, peer
 * address, peer port if client), with the connections opened, failed and
 * closed, retransmits, resets by reason, bytes each way and smoothed RTT.
 *
 * Loaded by agent/probe/flows. Cheap paths only: no program runs per packet.
 *  - tp_btf/inet_sock_set_state: SYN_SENT -> ESTABLISHED opens a client
 *    connection, SYN_RECV -> ESTABLISHED a server one (each gets its flow
 *    state in socket storage); SYN_SENT/SYN_RECV -> CLOSE fails; a socket
 *    with flow state reaching CLOSE is closed, and what it sent, received
 *    and retransmitted since it was last accounted is added.
 *  - tp_btf/tcp_retransmit_skb: a socket that retransmitted has its
 *    retransmits (and bytes) accounted at once.
 *  - tp_btf/tcp_send_reset, tcp_receive_reset: by the reason the tcp_reset
 *    tree names. A reset sent without a socket (NO_SOCKET: nothing listens)
 *    goes to the server edge of the local address and port it answered.
 *  - iter/bpf_sk_storage_map: run by user space at the end of each interval
 *    over every socket with flow state, so a long-lived connection's bytes,
 *    retransmits and RTT count in the interval they happen, not at close.
 *
 * Intervals: every edge key carries the generation it belongs to (gen).
 * User space flips gen, waits for programs that read the old value to
 * finish (membarrier: an RCU grace period), then reads and deletes the old
 * generation's entries, so no count is lost or counted twice between
 * intervals. What cannot get an entry (the edge table or the detail table
 * full) goes to the generation's overflow record, counted, never lost.
 */
#include "nbs.h"
#include "loglinear.h"

const volatile __u32 target_netns = 0; /* 0 = every namespace */

/* The generation new counts go to (0 or 1); written by user space. */
volatile __u32 gen = 0;

/* Set by user space once a peer is marked translated (flow_dnat_peers):
 * until then a connect does not look it up. */
volatile __u32 dnat_marked = 0;

enum nbs_flow_role {
	NBS_FLOW_CLIENT = 1,
	NBS_FLOW_SERVER = 2,
};

enum nbs_flow_detail {
	NBS_FD_RTT = 1,      /* code: log-linear bucket of the smoothed RTT in ns */
	NBS_FD_RST_SENT = 2, /* code: enum sk_rst_reason */
	NBS_FD_RST_RECV = 3, /* code: socket state */
	NBS_FD_DROP = 4,     /* code: enum skb_drop_reason */
};

struct nbs_fedge_key {
	__u32 gen;
	__u32 netns;
	__u8 role;
	__u8 dnat; /* a client edge of one connection to a translated peer */
	__u16 family;
	__u16 lport; /* server edges, and client edges with dnat */
	__u16 rport; /* client edges only */
	__u8 laddr[16];
	__u8 raddr[16];
};

struct nbs_fedge_val {
	__u64 opened;
	__u64 failed;
	__u64 closed;
	__u64 retrans;
	__u64 bytes_sent; /* acknowledged by the peer */
	__u64 bytes_recv;
	__u64 rtt_count;
	__u64 rtt_sum_ns;
};

struct nbs_fdetail_key {
	struct nbs_fedge_key edge;
	__u16 kind; /* enum nbs_flow_detail */
	__u16 pad;
	__u32 code;
};

/* A socket's flow state: its edge (gen unused) and what was accounted of
 * it so far. */
struct nbs_fsock {
	struct nbs_fedge_key edge;
	__u64 bytes_sent;
	__u64 bytes_recv;
	__u64 retrans;
	/* Set at CLOSE, when the socket was accounted for the last time; the
	 * state stays for the resets a closing socket sends after it. */
	__u64 closed;
};

#define NBS_FO_RST_SENT 64
#define NBS_FO_RST_RECV 16
#define NBS_FO_DROPS 256

/* What had no room in the tables, per generation and CPU. */
struct nbs_fover {
	struct nbs_fedge_val v;
	__u64 edges_lost;   /* counts that found the edge table full */
	__u64 details_lost; /* details that found the detail table full */
	__u64 rst_sent[NBS_FO_RST_SENT];
	__u64 rst_recv[NBS_FO_RST_RECV];
	__u64 drops[NBS_FO_DROPS];
	__u64 rtt[NBS_HIST_BUCKETS];
};

#ifndef NBS_FLOW_EDGES
#define NBS_FLOW_EDGES 16384
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NBS_FLOW_EDGES); /* both generations; resized by the loader */
	__type(key, struct nbs_fedge_key);
	__type(value, struct nbs_fedge_val);
} flow_edges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * NBS_FLOW_EDGES);
	__type(key, struct nbs_fdetail_key);
	__type(value, __u64);
} flow_details SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct nbs_fover);
} flow_over SEC(".maps");

/* Peers the node's connection tracking translates (DNAT: a Service's
 * address), found by user space in the conntrack tables. A client edge to
 * one is kept per connection (its local port in the key, dnat set) for
 * user space to split by the backend each connection was translated to. */
struct nbs_fpeer {
	__u32 netns;
	__u16 family;
	__u16 port;
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nbs_fpeer);
	__type(value, __u8);
} flow_dnat_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nbs_fsock);
} flow_sock SEC(".maps");

/* Keeps the types in the object's BTF for bpf2go -type. */
const struct nbs_fdetail_key *unused_nbs_fdetail_key __attribute__((unused));
const struct nbs_fover *unused_nbs_fover __attribute__((unused));
const struct nbs_fpeer *unused_nbs_fpeer __attribute__((unused));

static __always_inline struct nbs_fover *over(__u32 g)
{
	return bpf_map_lookup_elem(&flow_over, &g);
}

/* The edge's counters in the current generation, inserted the first time;
 * NULL when the table is full (the caller counts in the overflow record). */
static __always_inline struct nbs_fedge_val *edge(struct nbs_fedge_key *k)
{
	struct nbs_fedge_val zero = {};
	struct nbs_fedge_val *v;

	v = bpf_map_lookup_elem(&flow_edges, k);
	if (v)
		return v;
	bpf_map_update_elem(&flow_edges, k, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&flow_edges, k);
}

/* The counters to add to: the edge's, or the overflow record's. */
static __always_inline struct nbs_fedge_val *counters(struct nbs_fedge_key *k)
{
	struct nbs_fedge_val *v = edge(k);
	struct nbs_fover *o;

	if (v)
		return v;
	o = over(k->gen);
	if (!o)
		return NULL;
	o->edges_lost++;
	return &o->v;
}

/* Count a detail in the overflow record o. Per-CPU, and a tracing
 * program does not nest inside itself on a CPU, but the programs here may
 * run inside one another (a reset sent from a state change), hence the
 * atomics. */
static __always_inline void over_detail(struct nbs_fover *o, __u16 kind, __u32 code)
{
	switch (kind) {
	case NBS_FD_RTT:
		__sync_fetch_and_add(&o->rtt[code < NBS_HIST_BUCKETS ? code : NBS_HIST_BUCKETS - 1], 1);
		break;
	case NBS_FD_RST_SENT:
		__sync_fetch_and_add(&o->rst_sent[code & (NBS_FO_RST_SENT - 1)], 1);
		break;
	case NBS_FD_RST_RECV:
		__sync_fetch_and_add(&o->rst_recv[code & (NBS_FO_RST_RECV - 1)], 1);
		break;
	case NBS_FD_DROP:
		__sync_fetch_and_add(&o->drops[code & (NBS_FO_DROPS - 1)], 1);
		break;
	}
}

static __always_inline void detail(struct nbs_fedge_key *k, __u16 kind, __u32 code)
{
	struct nbs_fdetail_key dk = {};
	struct nbs_fover *o;
	__u64 one = 1, *v;

	dk.edge = *k;
	dk.kind = kind;
	dk.code = code;
	v = bpf_map_lookup_elem(&flow_details, &dk);
	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	if (bpf_map_update_elem(&flow_details, &dk, &one, BPF_NOEXIST) == 0)
		return;
	v = bpf_map_lookup_elem(&flow_details, &dk);
	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	/* The table is full: the overflow record keeps the detail. */
	o = over(k->gen);
	if (!o)
		return;
	__sync_fetch_and_add(&o->details_lost, 1);
	over_detail(o, kind, code);
}

/* A reset sent or received, or a drop, on the edge k (its gen not set
 * yet): the edge is made to exist for the detail to be read with; with the
 * edge table full, the overflow record keeps both. */
static __always_inline void count_detail(struct nbs_fedge_key *k, __u16 kind, __u32 code)
{
	struct nbs_fover *o;

	if (target_netns && k->netns != target_netns)
		return;
	k->gen = gen & 1;
	if (edge(k)) {
		detail(k, kind, code);
		return;
	}
	o = over(k->gen);
	if (!o)
		return;
	__sync_fetch_and_add(&o->edges_lost, 1);
	over_detail(o, kind, code);
}

/* The edge of a socket from its own addresses. */
static __always_inline void sk_edge(const struct sock *sk, __u8 role, struct nbs_fedge_key *k)
{
	struct nbs_tuple t = {};

	nbs_sk_tuple(sk, &t);
	__builtin_memset(k, 0, sizeof(*k));
	k->netns = nbs_sk_netns(sk);
	k->role = role;
	k->family = t.family;
	__builtin_memcpy(k->laddr, t.saddr, 16);
	__builtin_memcpy(k->raddr, t.daddr, 16);
	if (role == NBS_FLOW_SERVER) {
		k->lport = t.sport;
	} else {
		struct nbs_fpeer peer = {.netns = k->netns, .family = t.family, .port = t.dport};

		k->rport = t.dport;
		if (!dnat_marked)
			return;
		__builtin_memcpy(peer.addr, t.daddr, 16);
		if (bpf_map_lookup_elem(&flow_dnat_peers, &peer)) {
			k->dnat = 1;
			k->lport = t.sport;
		}
	}
}

/* Raise *seen to now and return by how much, once across CPUs: the
 * iterator and a socket's own hooks may account one socket at once. */
static __always_inline __u64 advance(__u64 *seen, __u64 now)
{
	for (int i = 0; i < 4; i++) {
		__u64 old = *(volatile __u64 *)seen;

		if (now <= old)
			return 0;
		if (__sync_val_compare_and_swap(seen, old, now) == old)
			return now - old;
	}
	return 0;
}

/* The data bytes the peer acknowledged and the socket received, without
 * the FINs, which take a sequence number each and so count in the kernel's
 * bytes_acked and bytes_received. The kernel calls the tracepoint before it
 * stores the new state, so at CLOSE skc_state is still the one it left.
 * Our FIN was acknowledged once in FIN_WAIT2, and in CLOSING or LAST_ACK
 * when everything sent is; theirs was received once tcp_fin marked the
 * socket SOCK_DONE. */
static __always_inline __u64 payload_sent(const struct sock *sk, const struct tcp_sock *tp)
{
	__u8 state = sk->__sk_common.skc_state;
	__u64 n = tp->bytes_acked;
	bool fin = state == TCP_FIN_WAIT2 ||
		   ((state == TCP_CLOSING || state == TCP_LAST_ACK) && tp->snd_una == tp->write_seq);

	return fin && n ? n - 1 : n;
}

static __always_inline __u64 payload_recv(const struct sock *sk, const struct tcp_sock *tp)
{
	__u64 n = tp->bytes_received;

	return (sk->__sk_common.skc_flags & (1UL << SOCK_DONE)) && n ? n - 1 : n;
}

/* Add what the socket sent, received and retransmitted since it was last
 * accounted to its edge, and with rtt, a sample of its smoothed RTT. */
static __always_inline void account(const struct sock *sk, struct nbs_fsock *fs, bool closed, bool rtt)
{
	struct nbs_fedge_key k = fs->edge;
	struct nbs_fedge_val *v;
	struct tcp_sock *tp;
	__u64 sent, recv, retr, srtt_ns = 0;

	tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return;
	sent = advance(&fs->bytes_sent, payload_sent(sk, tp));
	recv = advance(&fs->bytes_recv, payload_recv(sk, tp));
	retr = advance(&fs->retrans, tp->total_retrans);
	/* A live connection's RTT is sampled only in an interval it moved
	 * data in: an idle one's smoothed RTT is as old as its last ACK. */
	if (rtt && (sent || recv || retr || closed))
		srtt_ns = (__u64)(tp->srtt_us >> 3) * 1000;
	if (!sent && !recv && !retr && !closed)
		return;
	k.gen = gen & 1;
	v = counters(&k);
	if (!v)
		return;
	if (sent)
		__sync_fetch_and_add(&v->bytes_sent, sent);
	if (recv)
		__sync_fetch_and_add(&v->bytes_recv, recv);
	if (retr)
		__sync_fetch_and_add(&v->retrans, retr);
	if (closed)
		__sync_fetch_and_add(&v->closed, 1);
	if (srtt_ns) {
		__sync_fetch_and_add(&v->rtt_count, 1);
		__sync_fetch_and_add(&v->rtt_sum_ns, srtt_ns);
		detail(&k, NBS_FD_RTT, nbs_hist_slot(srtt_ns));
	}
}

static __always_inline void count_key(struct nbs_fedge_key *k, bool opened)
{
	struct nbs_fedge_val *v;

	k->gen = gen & 1;
	v = counters(k);
	if (!v)
		return;
	if (opened)
		__sync_fetch_and_add(&v->opened, 1);
	else
		__sync_fetch_and_add(&v->failed, 1);
}

static __always_inline void count_edge(const struct sock *sk, __u8 role, bool opened)
{
	struct nbs_fedge_key k;

	sk_edge(sk, role, &k);
	count_key(&k, opened);
}

/* A connection that reached ESTABLISHED: count it opened and give the
 * socket its flow state, starting from what it carries already (the
 * handshake's bytes are not data). */
static __always_inline void opened(struct sock *sk, __u8 role)
{
	struct nbs_fedge_key k;
	struct nbs_fsock *fs;
	struct tcp_sock *tp;

	sk_edge(sk, role, &k);
	fs = bpf_sk_storage_get(&flow_sock, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (fs) {
		fs->edge = k;
		tp = bpf_skc_to_tcp_sock(sk);
		if (tp) {
			fs->bytes_sent = payload_sent(sk, tp);
			fs->bytes_recv = payload_recv(sk, tp);
			fs->retrans = tp->total_retrans;
		}
		/* A socket disconnected (connect(AF_UNSPEC)) and connected
		 * again keeps its storage: this is a new connection. */
		fs->closed = 0;
	}
	count_key(&k, true);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(nbs_flow_state, struct sock *sk, int oldstate, int newstate)
{
	struct nbs_fsock *fs;

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	if (target_netns && nbs_sk_netns(sk) != target_netns)
		return 0;
	if (newstate == TCP_ESTABLISHED) {
		if (oldstate == TCP_SYN_SENT)
			opened(sk, NBS_FLOW_CLIENT);
		else if (oldstate == TCP_SYN_RECV)
			opened(sk, NBS_FLOW_SERVER);
		return 0;
	}
	if (newstate != TCP_CLOSE)
		return 0;
	if (oldstate == TCP_SYN_SENT) {
		count_edge(sk, NBS_FLOW_CLIENT, false);
		return 0;
	}
	if (oldstate == TCP_SYN_RECV) {
		count_edge(sk, NBS_FLOW_SERVER, false);
		return 0;
	}
	fs = bpf_sk_storage_get(&flow_sock, sk, 0, 0);
	if (!fs)
		return 0; /* opened before the agent started, or never */
	if (__sync_lock_test_and_set(&fs->closed, 1))
		return 0;
	account(sk, fs, true, true);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(nbs_flow_retrans, const struct sock *sk, const struct sk_buff *skb, int err)
{
	struct nbs_fsock *fs;

	if (err || !sk)
		return 0;
	if (target_netns && nbs_sk_netns(sk) != target_netns)
		return 0;
	fs = bpf_sk_storage_get(&flow_sock, (struct sock *)sk, 0, 0);
	if (!fs || fs->closed)
		return 0;
	account(sk, fs, false, false);
	return 0;
}

/* The edge a reset belongs to: its socket's, or for a reset sent without a
 * full socket, the one the socket's or packet's addresses make: a request
 * socket's is a server edge; a NO_SOCKET reset's is the server edge of the
 * address and port the packet came to. A timewait socket's role is not
 * known; it is left out (the tcp_reset tree counts it). */
static __always_inline bool rst_edge(const struct sock *sk, const struct sk_buff *skb, struct nbs_fedge_key *k)
{
	struct nbs_fsock *fs;
	struct nbs_tuple t = {};

	if (sk) {
		if (nbs_sk_fullsock(sk)) {
			fs = bpf_sk_storage_get(&flow_sock, (struct sock *)sk, 0, 0);
			if (!fs)
				return false;
			*k = fs->edge;
			return true;
		}
		if (sk->__sk_common.skc_state != TCP_NEW_SYN_RECV)
			return false;
		sk_edge(sk, NBS_FLOW_SERVER, k);
		return true;
	}
	if (!skb || nbs_skb_tuple(skb, &t))
		return false;
	/* The packet answered: it came from the peer to the local address. */
	__builtin_memset(k, 0, sizeof(*k));
	k->netns = nbs_skb_netns(skb);
	k->role = NBS_FLOW_SERVER;
	k->family = t.family;
	k->lport = t.dport;
	__builtin_memcpy(k->laddr, t.daddr, 16);
	__builtin_memcpy(k->raddr, t.saddr, 16);
	return true;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(nbs_flow_rst_send, const struct sock *sk, const struct sk_buff *skb, enum sk_rst_reason reason)
{
	struct nbs_fedge_key k;

	if (rst_edge(sk, skb, &k))
		count_detail(&k, NBS_FD_RST_SENT, reason);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(nbs_flow_rst_recv, struct sock *sk)
{
	struct nbs_fedge_key k;
	__u32 state;

	if (!sk)
		return 0;
	state = sk->__sk_common.skc_state;
	if (state == TCP_SYN_SENT) {
		/* A refused connect: no flow state yet, its edge is the client's. */
		sk_edge(sk, NBS_FLOW_CLIENT, &k);
	} else if (!rst_edge(sk, NULL, &k)) {
		return 0;
	}
	count_detail(&k, NBS_FD_RST_RECV, state);
	return 0;
}

/* A packet the kernel dropped (kfree_skb fires for drops only; a packet
 * consumed normally goes to consume_skb): counted on the edge of its
 * socket when it has one with flow state, by the drop reason the drops
 * tree names. A packet of a connection is tied to its socket when it was
 * sent, and when received once the socket was found: for an established
 * connection that is as early as IP's early demux, before netfilter's
 * input hook; drops before it (the device, the qdisc of another host, a
 * prerouting rule) are not on any edge, only in the drops tree. Runs per
 * dropped packet, like the drops probe's program, and leaves at once for
 * one without a full TCP socket. */
SEC("tp_btf/kfree_skb")
int BPF_PROG(nbs_flow_drop, struct sk_buff *skb, void *location, enum skb_drop_reason reason,
	     struct sock *rx_sk)
{
	struct nbs_fedge_key k;
	struct nbs_fsock *fs;
	struct sock *sk;

	sk = skb->sk;
	if (!sk)
		sk = rx_sk;
	if (!sk || !nbs_sk_fullsock(sk) || sk->sk_protocol != IPPROTO_TCP)
		return 0;
	fs = bpf_sk_storage_get(&flow_sock, sk, 0, 0);
	if (!fs)
		return 0;
	k = fs->edge;
	count_detail(&k, NBS_FD_DROP, reason);
	return 0;
}

/* Run by user space at the end of each interval: accounts every socket
 * with flow state (a live connection) into the current generation. */
SEC("iter/bpf_sk_storage_map")
int nbs_flow_iter(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sock *sk = ctx->sk;
	/* The socket's storage in flow_sock, the map iterated: no lookup
	 * (bpf_sk_storage_get was most of what an idle agent's iteration
	 * cost). */
	struct nbs_fsock *fs = ctx->value;

	if (!sk || !fs || fs->closed)
		return 0;
	account(sk, fs, false, true);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
