package evidencecost

// The peers' objects are committed like the agent's (see
// agent/probe/tcpreset/gen.go); -mcpu=v3 for the atomic add.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include" -target amd64 evpeer evpeer.bpf.c
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include" -target amd64 kfreepeer kfreepeer.bpf.c
