package latencyecn

// The object is committed so that building the agent needs no clang (see
// agent/probe/tcpreset/gen.go for the flags).
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 -type nbs_ecn_stats -type nbs_ecn_counts latencyecn ../../../bpf/latencyecn.bpf.c
