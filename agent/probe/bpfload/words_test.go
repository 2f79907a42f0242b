package bpfload

import (
	"errors"
	"reflect"
	"structs"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

type wordCounters struct {
	_     structs.HostLayout
	Hits  uint64
	Cache [3]struct {
		_          structs.HostLayout
		Key, Count uint64
	}
}

// LookupSum's word path (one lookup into one buffer) reads what
// cilium/ebpf's lookup and Sum read, for arrays and hashes, uint32 and
// uint64 keys; an absent key is ErrKeyNotExist; a type with padding takes
// the general path.
func TestLookupSumByWords(t *testing.T) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	per := make([]wordCounters, cpus)
	var want wordCounters
	for i := range per {
		per[i].Hits = uint64(1 + i)
		per[i].Cache[1].Count = uint64(100 * (i + 1))
		per[i].Cache[2].Key = 1 << 63 // wraps across CPUs, as the kernel's do
		want.Hits += per[i].Hits
		want.Cache[1].Count += per[i].Cache[1].Count
		want.Cache[2].Key += per[i].Cache[2].Key
	}
	size := uint32(reflect.TypeFor[wordCounters]().Size())
	cases := []struct {
		name string
		spec ebpf.MapSpec
		key  any
	}{
		{"array, uint32 key", ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: size, MaxEntries: 4}, uint32(2)},
		{"hash, uint64 key", ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 8, ValueSize: size, MaxEntries: 4}, uint64(1<<40 + 7)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := ebpf.NewMap(&c.spec)
			if err != nil {
				netlab.SkipOrFail(t, "per-CPU map: %v", err)
			}
			defer m.Close()
			if err := m.Put(c.key, per); err != nil {
				t.Fatal(err)
			}
			got, ok, err := lookupWords[wordCounters](m, c.key)
			if !ok || err != nil || got != want {
				t.Fatalf("lookupWords = %+v, %v, %v; want %+v", got, ok, err, want)
			}
			var general []wordCounters
			if err := m.Lookup(c.key, &general); err != nil {
				t.Fatal(err)
			}
			if sum, err := Sum(general); err != nil || sum != got {
				t.Fatalf("general path %+v, %v; word path %+v", sum, err, got)
			}
		})
	}
	t.Run("absent key", func(t *testing.T) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: size, MaxEntries: 4})
		if err != nil {
			netlab.SkipOrFail(t, "per-CPU map: %v", err)
		}
		defer m.Close()
		if _, err := LookupSum[wordCounters](m, uint32(9)); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("LookupSum of an absent key: %v, want ErrKeyNotExist", err)
		}
	})
	t.Run("padding takes the general path", func(t *testing.T) {
		if _, ok := words(reflect.TypeFor[counters]()); ok {
			t.Fatal("counters (a uint32 and padding) taken for words")
		}
		if n, ok := words(reflect.TypeFor[wordCounters]()); !ok || n != 7 {
			t.Fatalf("wordCounters: %d words, %v; want 7", n, ok)
		}
	})
}
