// Package peer is the netstacklat-shaped programs that bench/latencyrx
// measures beside the receive-latency probe in the same run: the shape
// before May 2025 (bpf/test/netstacklat_peer.bpf.c: a per-CPU array of log2
// buckets per hook) and the current one (bpf/test/netstacklat_current_peer.bpf.c:
// one per-CPU hash of (cgroup, ifindex, hook, bucket), two lookups a packet,
// the TCP read's head-of-line test).
package peer

// The objects are committed so that running the benchmark needs no clang.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 peer ../../../bpf/test/netstacklat_peer.bpf.c
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 current ../../../bpf/test/netstacklat_current_peer.bpf.c
