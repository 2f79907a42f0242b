package flows

// The object is committed so that building the agent needs no clang (see
// agent/probe/tcpreset/gen.go for the flags; -mcpu=v3 for the atomics).
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../bpf/include" -target amd64 -type nbs_fedge_key -type nbs_fedge_val -type nbs_fdetail_key -type nbs_fover -type nbs_fpeer flows ../../../bpf/flows.bpf.c
