//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * The floor of each hook an always-on program of the agent uses: an empty
 * tp_btf program at the same tracepoint, for bench/floor. What the kernel
 * charges an empty program (the trampoline's entry and exit, and the
 * run-time statistics' two clock reads around it) is the least any program
 * at that hook can cost; the benchmarks report each program beside it, in
 * the same run, so "ns/run" says how much is the program's own work.
 *
 * Each floor reads nothing from its arguments: it pays no cache miss on
 * the packet or socket, which the first real program at the hook pays.
 */
#include "nbs.h"

#define FLOOR(hook)                                                                                                    \
	SEC("tp_btf/" #hook)                                                                                           \
	int floor_##hook(void *ctx)                                                                                    \
	{                                                                                                              \
		return 0;                                                                                              \
	}

FLOOR(kfree_skb)
FLOOR(tcp_send_reset)
FLOOR(tcp_receive_reset)
FLOOR(tcp_retransmit_skb)
FLOOR(tcp_retransmit_synack)
FLOOR(tcp_probe)
FLOOR(skb_copy_datagram_iovec)
FLOOR(sk_data_ready)
FLOOR(sock_recv_length)
FLOOR(net_dev_queue)
FLOOR(netif_receive_skb)
FLOOR(tcp_sendmsg_locked)

char LICENSE[] SEC("license") = "GPL";
