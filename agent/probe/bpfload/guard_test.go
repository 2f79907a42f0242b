package bpfload

import (
	"errors"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// A Guarded object runs BeforeAttach on every real attachment (not on a
// redundant one), BeforeClose before freeing, and after Close refuses
// every use with ErrClosed wrapped in what was being done.
func TestGuardedLifecycle(t *testing.T) {
	g := &Guarded{Object: Object{Name: "counter", Needs: "a kernel with BTF tracepoint sys_enter"}}
	var c counter
	if err := g.Load(counterSpec(countRuns), nil, &c, nil); err != nil {
		netlab.SkipOrFail(t, "bpfload: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() })
	g.Points = []Point{Tracepoint("sys_enter", c.Count)}
	var calls []string
	g.BeforeAttach = func() error { calls = append(calls, "before-attach"); return nil }
	g.BeforeClose = func() error { calls = append(calls, "before-close"); return nil }

	for range 2 {
		if err := g.Attach(); err != nil {
			t.Fatal(err)
		}
	}
	if !g.Attached() || runs(t, &c) < 100 {
		t.Fatal("not running after Attach")
	}
	if err := g.Detach(); err != nil || g.Attached() {
		t.Fatalf("Detach: %v, attached %v", err, g.Attached())
	}
	if err := g.Attach(); err != nil {
		t.Fatal(err)
	}
	var read uint64
	if err := g.Do("read counter", func() (err error) {
		read, err = LookupSum[uint64](c.Counts, uint32(0))
		return err
	}); err != nil || read == 0 {
		t.Fatalf("Do read %d, %v", read, err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if want := []string{"before-attach", "before-attach", "before-close"}; !slices.Equal(calls, want) {
		t.Fatalf("hooks ran %v, want %v", calls, want)
	}
	err := g.Do("read counter", func() error { t.Fatal("Do ran after Close"); return nil })
	if !errors.Is(err, ErrClosed) || err.Error() != "read counter: probe closed" {
		t.Fatalf("Do after Close: %v", err)
	}
	if err := g.Attach(); !errors.Is(err, ErrClosed) || g.Attached() {
		t.Fatalf("Attach after Close: %v", err)
	}
}

// A failing BeforeAttach leaves the programs detached and says which
// object it was.
func TestGuardedBeforeAttachFails(t *testing.T) {
	g := &Guarded{Object: Object{Name: "counter"}}
	var c counter
	if err := g.Load(counterSpec(countRuns), nil, &c, nil); err != nil {
		netlab.SkipOrFail(t, "bpfload: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() })
	g.Points = []Point{Tracepoint("sys_enter", c.Count)}
	g.BeforeAttach = func() error { return errors.New("table busy") }
	if err := g.Attach(); err == nil || err.Error() != "attach counter: table busy" || g.Attached() {
		t.Fatalf("Attach: %v, attached %v", err, g.Attached())
	}
}

// Each visits every entry; DeleteIf deletes exactly those it is told to.
func TestEachAndDeleteIf(t *testing.T) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 64})
	if err != nil {
		netlab.SkipOrFail(t, "create hash map: %v", err)
	}
	defer m.Close()
	for k := uint32(0); k < 10; k++ {
		if err := m.Put(k, uint64(k)*10); err != nil {
			t.Fatal(err)
		}
	}
	if err := DeleteIf(m, func(k uint32, v *uint64) bool { return k%2 == 1 || *v == 40 }); err != nil {
		t.Fatal(err)
	}
	var keys []uint32
	if err := Each(m, func(k uint32, v *uint64) {
		if *v != uint64(k)*10 {
			t.Errorf("key %d has %d", k, *v)
		}
		keys = append(keys, k)
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []uint32{0, 2, 6, 8}; !slices.Equal(keys, want) {
		t.Fatalf("left %v, want %v", keys, want)
	}
}

// EachSum sums every key's per-CPU values.
func TestEachSum(t *testing.T) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 8})
	if err != nil {
		netlab.SkipOrFail(t, "create per-CPU hash map: %v", err)
	}
	defer m.Close()
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	for k := uint32(1); k <= 3; k++ {
		per := make([]uint64, n)
		for i := range per {
			per[i] = uint64(k)
		}
		if err := m.Put(k, per); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint32]uint64{}
	if err := EachSum(m, func(k uint32, v uint64) { got[k] = v }); err != nil {
		t.Fatal(err)
	}
	for k := uint32(1); k <= 3; k++ {
		if got[k] != uint64(k)*uint64(n) {
			t.Fatalf("key %d summed to %d over %d CPUs", k, got[k], n)
		}
	}
	if len(got) != 3 {
		t.Fatalf("visited %v", got)
	}
}
