package floor

// The object is committed so that running the benchmarks needs no clang.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include" -target amd64 floor ../../bpf/test/floor.bpf.c
