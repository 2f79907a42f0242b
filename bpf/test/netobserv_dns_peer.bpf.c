//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * A peer of bpf/dns.bpf.c shaped like NetObserv's tracepoint DNS tracker
 * (netobserv-ebpf-agent, bpf/dns_tracker.h of the releases that hooked
 * tracepoint/net/net_dev_queue), for bench/dns only. Per packet, as that
 * tracker does: the program copies the whole struct
 * sk_buff out of the tracepoint's skbaddr with one probe read, reads the
 * link, network and transport headers from skb->head at the offsets the
 * copy holds (one probe read each), and for UDP or TCP port 53 reads the
 * DNS header; a query's (addresses, ports, id, protocol, ifindex) goes into
 * a hash with the time if not there yet, a response's reversed key is
 * looked up, the latency computed and the entry deleted. NetObserv then
 * updates its flow record with the latency; the peer keeps the last
 * latency and a count in an array instead, its cheapest equivalent. No
 * namespace filter, no response codes, no evidence, no timeouts.
 */
#include "nbs.h"

#define PEER_ETH_P_IP 0x0800
#define PEER_ETH_P_IPV6 0x86DD
#define PEER_DNS_PORT 53
#define PEER_QR 0x8000
#define PEER_UDP_MAXMSG 512

struct peer_dns_id {
	__u8 src_ip[16];
	__u8 dst_ip[16];
	__u16 src_port;
	__u16 dst_port;
	__u16 id;
	__u8 protocol;
	__u8 pad;
	__u32 if_index;
};

struct peer_dns_hdr {
	__u16 id;
	__u16 flags;
	__u16 qdcount;
	__u16 ancount;
	__u16 nscount;
	__u16 arcount;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 17);
	__type(key, struct peer_dns_id);
	__type(value, __u64);
} peer_dns_flows SEC(".maps");

struct peer_dns_result {
	__u64 matched;
	__u64 last_latency;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct peer_dns_result);
} peer_dns_results SEC(".maps");

static __always_inline int peer_trace_dns(struct sk_buff *skb)
{
	struct peer_dns_id id = {}, req = {};
	struct peer_dns_hdr dns;
	struct ethhdr eth;
	__u8 protocol = 0;
	__u16 len = 0;

	id.if_index = skb->skb_iif;
	/* L2 */
	if (bpf_probe_read_kernel(&eth, sizeof(eth), skb->head + skb->mac_header))
		return -1;
	/* L3 */
	if (eth.h_proto == bpf_htons(PEER_ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), skb->head + skb->network_header))
			return -1;
		__builtin_memcpy(id.src_ip + 12, &ip.saddr, 4);
		__builtin_memcpy(id.dst_ip + 12, &ip.daddr, 4);
		id.src_ip[10] = id.src_ip[11] = id.dst_ip[10] = id.dst_ip[11] = 0xff;
		protocol = ip.protocol;
	} else if (eth.h_proto == bpf_htons(PEER_ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), skb->head + skb->network_header))
			return -1;
		__builtin_memcpy(id.src_ip, &ip6.saddr, 16);
		__builtin_memcpy(id.dst_ip, &ip6.daddr, 16);
		protocol = ip6.nexthdr;
	} else {
		return -1;
	}
	/* L4 */
	if (protocol == IPPROTO_UDP) {
		struct udphdr udp;

		if (bpf_probe_read_kernel(&udp, sizeof(udp), skb->head + skb->transport_header))
			return -1;
		id.src_port = bpf_ntohs(udp.source);
		id.dst_port = bpf_ntohs(udp.dest);
		if (bpf_ntohs(udp.len) - sizeof(struct udphdr) > PEER_UDP_MAXMSG)
			return -1;
		len = sizeof(struct udphdr);
	} else if (protocol == IPPROTO_TCP) {
		struct tcphdr tcp;

		if (bpf_probe_read_kernel(&tcp, sizeof(tcp), skb->head + skb->transport_header))
			return -1;
		id.src_port = bpf_ntohs(tcp.source);
		id.dst_port = bpf_ntohs(tcp.dest);
		len = tcp.doff * 4 + 2;
	} else {
		return -1;
	}
	if (id.dst_port != PEER_DNS_PORT && id.src_port != PEER_DNS_PORT)
		return 0;
	if (bpf_probe_read_kernel(&dns, sizeof(dns), skb->head + skb->transport_header + len))
		return -1;
	req.id = bpf_ntohs(dns.id);
	req.protocol = protocol;
	req.if_index = id.if_index;
	if (!(bpf_ntohs(dns.flags) & PEER_QR)) {
		__builtin_memcpy(req.src_ip, id.src_ip, 16);
		__builtin_memcpy(req.dst_ip, id.dst_ip, 16);
		req.src_port = id.src_port;
		req.dst_port = id.dst_port;
		if (!bpf_map_lookup_elem(&peer_dns_flows, &req)) {
			__u64 ts = bpf_ktime_get_ns();

			bpf_map_update_elem(&peer_dns_flows, &req, &ts, BPF_ANY);
		}
	} else {
		__u64 *ts;

		__builtin_memcpy(req.src_ip, id.dst_ip, 16);
		__builtin_memcpy(req.dst_ip, id.src_ip, 16);
		req.src_port = id.dst_port;
		req.dst_port = id.src_port;
		ts = bpf_map_lookup_elem(&peer_dns_flows, &req);
		if (ts) {
			__u32 zero = 0;
			struct peer_dns_result *r = bpf_map_lookup_elem(&peer_dns_results, &zero);

			if (r) {
				r->matched++;
				r->last_latency = bpf_ktime_get_ns() - *ts;
			}
			bpf_map_delete_elem(&peer_dns_flows, &req);
		}
	}
	return 0;
}

/* NetObserv attaches a classic tracepoint (tracepoint/net/net_dev_queue,
 * whose context holds skbaddr); that needs tracefs mounted, which the
 * machines this runs on do not have, so the peer is a raw tracepoint with
 * the skb as its first argument. The program's body, what run-time
 * statistics time, is the same; the classic tracepoint's own cost of
 * filling its record before the program runs is left out, in the peer's
 * favour. */
SEC("raw_tp/net_dev_queue")
int peer_dns_trace(struct bpf_raw_tracepoint_args *ctx)
{
	struct sk_buff skb;

	__builtin_memset(&skb, 0, sizeof(skb));
	bpf_probe_read_kernel(&skb, sizeof(skb), (void *)ctx->args[0]);
	return peer_trace_dns(&skb);
}

char LICENSE[] SEC("license") = "GPL";
