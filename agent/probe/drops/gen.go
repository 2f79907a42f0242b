package drops

// The object is committed so that building the agent needs no clang. -mcpu=v3
// is needed for the compare-and-swap of the evidence rate limit. -target
// amd64 makes bpf2go pass -D__TARGET_ARCH_x86 itself; bpf2go maps the source
// directory out of the debug info, so the output is byte-identical wherever
// the repository is checked out.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 -type nbs_drop_event drops ../../../bpf/drops.bpf.c
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 ksym ../../../bpf/ksym.bpf.c
