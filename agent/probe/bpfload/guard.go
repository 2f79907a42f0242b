package bpfload

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrClosed is returned by a probe's methods called after its Close.
var ErrClosed = errors.New("probe closed")

// Guarded is an Object behind the one lock its probe takes for every map
// read, attach, detach and close: no read can use a map descriptor that
// Close is freeing, a triggered probe cannot be attached twice by racing
// callers, and every call after Close fails with ErrClosed. Load it as an
// Object (Load is not locked: nothing else holds the probe yet).
type Guarded struct {
	Object
	// BeforeAttach, when set, runs under the lock just before the programs
	// attach: a triggered probe empties what an earlier attachment left
	// half-measured, so nothing is timed across the gap.
	BeforeAttach func() error
	// BeforeClose, when set, runs under the lock before the object is
	// freed: closing an evidence ring first ends its reader before the
	// ring's map goes.
	BeforeClose func() error

	mu     sync.Mutex
	closed bool
}

// Do runs fn under the lock, typically a map read; after Close it runs
// nothing and returns ErrClosed. Either error is wrapped with what, which
// says what was being done ("read retrans counts").
func (g *Guarded) Do(what string, fn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("%s: %w", what, ErrClosed)
	}
	if err := fn(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Attach runs BeforeAttach and attaches the programs (see Object.Attach);
// attaching an attached object does nothing.
func (g *Guarded) Attach() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("attach %s: %w", g.Name, ErrClosed)
	}
	if g.Object.Attached() {
		return nil
	}
	if g.BeforeAttach != nil {
		if err := g.BeforeAttach(); err != nil {
			return fmt.Errorf("attach %s: %w", g.Name, err)
		}
	}
	if err := g.Object.Attach(); err != nil {
		return err
	}
	g.log().Info(g.Name + " attached")
	return nil
}

// AttachOrClose attaches an always-on probe's programs at the end of its
// Load; when that fails it frees everything, as the probe is of no use.
// With a PinDir its links are pinned (or adopted): they outlive the agent.
func (g *Guarded) AttachOrClose() error {
	g.mu.Lock()
	g.pinLinks = true // an always-on probe keeps counting between agents
	g.mu.Unlock()
	if err := g.Attach(); err != nil {
		return errors.Join(err, g.Close())
	}
	return nil
}

// Detach detaches the programs; maps keep what they counted.
func (g *Guarded) Detach() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.Object.Attached() {
		return nil
	}
	err := g.Object.Detach()
	g.log().Info(g.Name + " detached")
	return err
}

// Attached says whether the programs are attached.
func (g *Guarded) Attached() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.Object.Attached()
}

// Close runs BeforeClose, then detaches and frees everything. It holds the
// lock throughout, so no Do is using a map while it goes. Closing a closed
// probe does nothing.
func (g *Guarded) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var first error
	if g.BeforeClose != nil {
		first = g.BeforeClose()
	}
	return errors.Join(first, g.Object.Close())
}

// Each calls fn for every entry of the hash map m.
func Each[K any, V any](m *ebpf.Map, fn func(K, *V)) error {
	var (
		k K
		v V
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(k, &v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", m, err)
	}
	return nil
}

// DeleteIf deletes the entries of the hash map m for which drop returns
// true. It collects the keys first: deleting while iterating can make the
// kernel's iteration start over.
func DeleteIf[K any, V any](m *ebpf.Map, drop func(K, *V) bool) error {
	var keys []K
	err := Each(m, func(k K, v *V) {
		if drop(k, v) {
			keys = append(keys, k)
		}
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete from %s: %w", m, err)
		}
	}
	return nil
}

// EachSum calls fn for every key of the per-CPU hash map m with its values
// summed over CPUs (see Sum). It reads the map in batches where the kernel
// can (BPF_MAP_LOOKUP_BATCH, see Batch), else an entry at a time.
func EachSum[K any, V any](m *ebpf.Map, fn func(K, V)) error {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("read %s: %w", m, err)
	}
	// Added up as words where V is made of uint64s (Sum goes through
	// reflect).
	n, byWords := words(reflect.TypeFor[V]())
	sum := func(per []V) (V, error) {
		var sum V
		if !byWords || n == 0 {
			return Sum(per)
		}
		if len(per) > 0 {
			addWords(unsafe.Slice((*uint64)(unsafe.Pointer(&sum)), n), unsafe.Slice((*uint64)(unsafe.Pointer(&per[0])), len(per)*n))
		}
		return sum, nil
	}
	// A batch of at most 32 KiB of values (every CPU's), 16 to 256 keys.
	size := max(16, min(batchSize, (32<<10)/max(1, cpus*int(m.ValueSize()))))
	keys, vals := make([]K, size), make([]V, size*cpus)
	var cursor ebpf.MapBatchCursor
	delivered := false
	for {
		got, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range got {
			s, err := sum(vals[i*cpus : (i+1)*cpus])
			if err != nil {
				return err
			}
			fn(keys[i], s)
		}
		delivered = delivered || got > 0
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil // the end
		case err == nil:
			continue
		case !delivered && (errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSPC)):
		default:
			return fmt.Errorf("read %s: %w", m, err)
		}
		break
	}
	// One slice for every entry (given a slice of the right length,
	// cilium/ebpf decodes into it rather than make one an entry).
	var k K
	per := make([]V, cpus)
	it := m.Iterate()
	for it.Next(&k, per) {
		s, err := sum(per)
		if err != nil {
			return err
		}
		fn(k, s)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", m, err)
	}
	return nil
}

// GuardedSum reads key from the per-CPU map m under g's lock, summed over
// CPUs (see Do and LookupSum): a probe's cumulative counts, typically key 0
// of its stats array.
func GuardedSum[T any](g *Guarded, what string, m *ebpf.Map, key any) (T, error) {
	var sum T
	err := g.Do(what, func() (err error) {
		sum, err = LookupSum[T](m, key)
		return err
	})
	return sum, err
}
