package bpfload

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// lookupWords is LookupSum for a T made of uint64s only (a histogram's
// buckets, a probe's counters) and a uint32 or uint64 key: the per-CPU
// values are read by one BPF_MAP_LOOKUP_ELEM into one buffer and added up
// as words. cilium/ebpf's lookup allocates the values twice (its buffer and
// the []T it decodes into) and the sum went through reflect: the largest
// part of an idle agent's garbage (a 4 KiB histogram a device, per CPU,
// every collection; bench/agentcost BenchmarkAgentIdle). ok is false when
// T or the key does not fit, for the general path.
func lookupWords[T any](m *ebpf.Map, key any) (sum T, ok bool, err error) {
	n, fits := words(reflect.TypeFor[T]())
	switch m.Type() {
	case ebpf.PerCPUArray, ebpf.PerCPUHash, ebpf.LRUCPUHash:
	default:
		return sum, false, nil
	}
	if !fits || n == 0 || int(m.ValueSize()) != 8*n {
		return sum, false, nil
	}
	var k uint64
	switch v := key.(type) {
	case uint32:
		k = uint64(v)
	case uint64:
		k = v
	default:
		return sum, false, nil
	}
	if m.KeySize() != 4 && m.KeySize() != 8 || m.KeySize() == 4 && k > 0xffffffff {
		return sum, false, nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return sum, false, nil //nolint:nilerr // the general path says why
	}
	// The key first, then the values: one heap buffer, which the
	// kernel reads and writes through the attributes' addresses. A
	// little-endian or big-endian uint32 key is the word's low half in
	// memory order either way.
	buf := make([]uint64, 1+cpus*n)
	if m.KeySize() == 4 {
		*(*uint32)(unsafe.Pointer(&buf[0])) = uint32(k)
	} else {
		buf[0] = k
	}
	attr := struct {
		mapFD uint32
		_     uint32
		key   uint64
		value uint64
		flags uint64
	}{mapFD: uint32(m.FD()), key: uint64(uintptr(unsafe.Pointer(&buf[0]))), value: uint64(uintptr(unsafe.Pointer(&buf[1])))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		if errno == unix.ENOENT {
			return sum, true, ebpf.ErrKeyNotExist
		}
		return sum, true, fmt.Errorf("lookup in %s: %w", m, errno)
	}
	addWords(unsafe.Slice((*uint64)(unsafe.Pointer(&sum)), n), buf[1:1+cpus*n])
	return sum, true, nil
}

// addWords adds each len(dst)-word value of src, one a CPU, into dst.
func addWords(dst, src []uint64) {
	n := len(dst)
	if n == 0 {
		return
	}
	for off := 0; off+n <= len(src); off += n {
		for i, v := range src[off : off+n] {
			dst[i] += v
		}
	}
}

// words is how many uint64s t is, when it is made of nothing else (blank
// zero-size fields, structs.HostLayout, aside) and has no padding.
func words(t reflect.Type) (int, bool) {
	switch t.Kind() {
	case reflect.Uint64:
		return 1, true
	case reflect.Array:
		n, ok := words(t.Elem())
		return n * t.Len(), ok
	case reflect.Struct:
		total := 0
		for f := range t.Fields() {
			if f.Name == "_" && f.Type.Size() == 0 {
				continue
			}
			if f.Name == "_" || !f.IsExported() {
				return 0, false
			}
			n, ok := words(f.Type)
			if !ok {
				return 0, false
			}
			total += n
		}
		return total, uintptr(total)*8 == t.Size()
	}
	return 0, false
}
