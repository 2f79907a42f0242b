package latencysizes

// The object is committed so that building the agent needs no clang (see
// agent/probe/tcpreset/gen.go for the flags).
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 -type nbs_sizes_stats -type nbs_sizes_counts latencysizes ../../../bpf/latencysizes.bpf.c
