//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * A peer-shaped evidence program for bench/evidencecost: what a typical
 * tracer does on tcp_send_reset — reserve a ring-buffer record the size of
 * ours (struct nbs_rst_event), fill it from the socket or the packet, and
 * submit it — with no counting and no rate limit. Loaded twice in one run:
 * submit_flags 0 (the kernel wakes the reader when it has caught up, i.e.
 * per event at a rare rate) and BPF_RB_NO_WAKEUP (the reader polls), beside
 * the agent's own tcp_send_reset program.
 */
#include "nbs.h"

const volatile __u32 target_netns = 0;
const volatile __u64 submit_flags = 0;

struct peer_event {
	__u64 ts_ns;
	__u32 netns;
	__u32 reason;
	__u8 direction;
	__u8 state;
	__u16 family;
	__u16 sport;
	__u16 dport;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} peer_events SEC(".maps");

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(peer_rst_evidence, const struct sock *sk, const struct sk_buff *skb, enum sk_rst_reason reason)
{
	struct nbs_tuple t = {};
	struct peer_event *ev;
	__u32 netns;

	netns = sk ? nbs_sk_netns(sk) : nbs_skb_netns(skb);
	if (target_netns && netns != target_netns)
		return 0;
	if (sk)
		nbs_sk_tuple(sk, &t);
	else if (skb)
		nbs_skb_tuple(skb, &t);
	ev = bpf_ringbuf_reserve(&peer_events, sizeof(*ev), 0);
	if (!ev)
		return 0;
	ev->ts_ns = bpf_ktime_get_ns();
	ev->netns = netns;
	ev->reason = reason;
	ev->direction = 1;
	ev->state = sk ? sk->__sk_common.skc_state : 0;
	ev->family = t.family;
	ev->sport = t.sport;
	ev->dport = t.dport;
	__builtin_memcpy(ev->saddr, t.saddr, 16);
	__builtin_memcpy(ev->daddr, t.daddr, 16);
	bpf_ringbuf_submit(ev, submit_flags);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
