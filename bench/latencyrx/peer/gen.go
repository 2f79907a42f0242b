// Package peer is the netstacklat-shaped program (bpf/test/netstacklat_peer.bpf.c)
// that bench/latencyrx measures beside the receive-latency probe in the same
// run.
package peer

// The object is committed so that running the benchmark needs no clang.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 peer ../../../bpf/test/netstacklat_peer.bpf.c
