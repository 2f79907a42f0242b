package bpfload

import (
	"maps"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// Batch.Each visits every entry once, as Each does: past several batches,
// with a struct value, kept buffers and all, and a map emptied since.
func TestBatchEach(t *testing.T) {
	type val struct {
		A uint64
		B uint32
		_ [4]byte
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: 4096})
	if err != nil {
		netlab.SkipOrFail(t, "create hash map: %v", err)
	}
	defer m.Close()
	const n = 3*batchSize + 11
	for k := range uint32(n) {
		if err := m.Put(k, val{A: uint64(k) * 3, B: k + 1}); err != nil {
			t.Fatal(err)
		}
	}
	var b Batch[uint32, val]
	for _, round := range []string{"first", "buffers kept"} {
		want, got := map[uint32]val{}, map[uint32]val{}
		if err := Each(m, func(k uint32, v *val) { want[k] = *v }); err != nil {
			t.Fatal(err)
		}
		visits := 0
		if err := b.Each(m, func(k uint32, v *val) { got[k] = *v; visits++ }); err != nil {
			t.Fatal(err)
		}
		if len(want) != n || visits != n || !maps.Equal(got, want) {
			t.Fatalf("%s: %d visits, %d entries, want Each's %d (equal %v)", round, visits, len(got), len(want), maps.Equal(got, want))
		}
	}
	if b.off {
		t.Log("this kernel has no batch lookup: read one by one")
	}
	for k := range uint32(n) {
		if err := m.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Each(m, func(uint32, *val) { t.Fatal("an entry of an empty map") }); err != nil {
		t.Fatal(err)
	}
}

// EachSum sums every key's per-CPU values past several batches, for a
// struct of uint64s.
func TestEachSumInBatches(t *testing.T) {
	type pair struct{ A, B uint64 }
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 16, MaxEntries: 4096})
	if err != nil {
		netlab.SkipOrFail(t, "create per-CPU hash map: %v", err)
	}
	defer m.Close()
	const n = 2*batchSize + 88
	for k := range uint32(n) {
		per := make([]pair, cpus)
		for c := range per {
			per[c] = pair{A: uint64(k), B: uint64(c + 1)}
		}
		if err := m.Put(k, per); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint32]pair{}
	visits := 0
	if err := EachSum(m, func(k uint32, v pair) { got[k] = v; visits++ }); err != nil {
		t.Fatal(err)
	}
	if visits != n || len(got) != n {
		t.Fatalf("%d visits of %d keys, want %d", visits, len(got), n)
	}
	wantB := uint64(cpus * (cpus + 1) / 2)
	for k, v := range got {
		if v.A != uint64(k)*uint64(cpus) || v.B != wantB {
			t.Fatalf("key %d summed to %+v, want {%d %d}", k, v, uint64(k)*uint64(cpus), wantB)
		}
	}
}
