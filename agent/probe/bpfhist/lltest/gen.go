// Package lltest holds a BPF program that runs bpf/include/loglinear.h in
// the kernel, for bpfhist's test that it computes Go's loglinear.Index. Only
// tests import it.
package lltest

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../../../bpf/include" -target amd64 lltest ../../../../bpf/test/loglinear_test.bpf.c
