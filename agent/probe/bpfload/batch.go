package bpfload

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// batchSize is how many entries one batch lookup reads.
const batchSize = 256

// Batch reads a hash map batchSize entries a system call
// (BPF_MAP_LOOKUP_BATCH) into buffers it keeps, where Each reads an
// entry's key and then its value, two system calls an entry: a collection
// drains tables of thousands of entries on a busy node. The zero value is
// ready; it is not safe for concurrent use.
type Batch[K, V any] struct {
	keys []K
	vals []V
	off  bool // the kernel has no batch lookup of this map (before 5.6)
}

// Each calls fn for every entry of m, as Each does; v is valid only during
// the call.
func (b *Batch[K, V]) Each(m *ebpf.Map, fn func(K, *V)) error {
	if !b.off {
		if b.keys == nil {
			b.keys, b.vals = make([]K, batchSize), make([]V, batchSize)
		}
		var cursor ebpf.MapBatchCursor
		delivered := false
		for {
			n, err := m.BatchLookup(&cursor, b.keys, b.vals, nil)
			for i := range n {
				fn(b.keys[i], &b.vals[i])
			}
			delivered = delivered || n > 0
			switch {
			case errors.Is(err, ebpf.ErrKeyNotExist):
				return nil // the end
			case err == nil:
				continue
			case !delivered && (errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL)):
				b.off = true
			case !delivered && errors.Is(err, unix.ENOSPC):
				// A bucket larger than a batch: one by one, this time.
			default:
				return fmt.Errorf("read %s: %w", m, err)
			}
			break
		}
	}
	return Each(m, fn)
}
