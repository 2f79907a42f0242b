package latency

// The object is committed so that building the agent needs no clang. See
// agent/probe/tcpreset/gen.go for the flags; this program needs no atomics,
// but is built like the others.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 latency ../../../bpf/latency.bpf.c
