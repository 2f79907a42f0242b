package peer

// The object is committed so that running the benchmark needs no clang.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 peer ../../../bpf/test/netobserv_flows_peer.bpf.c
