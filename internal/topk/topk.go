// Package topk keeps the k first items of a stream by an order, in a heap
// of k: what it holds is bounded by k, not by the stream, and most items
// cost one comparison with the heap's last-ranked. The agent's flow edges
// (the top K of a report, the rest folded into "other") and the
// collector's map pages (the first 500 of 50,000 edges) use it.
package topk

import "slices"

// Heap holds the k first items pushed so far by cmp (negative: a ranks
// before b).
type Heap[T any] struct {
	k   int
	cmp func(a, b T) int
	h   []T // h[0] ranks last of those kept
}

// New returns an empty heap of k items; buf is storage to reuse (its
// contents are ignored).
func New[T any](k int, cmp func(a, b T) int, buf []T) *Heap[T] {
	return &Heap[T]{k: max(k, 0), cmp: cmp, h: buf[:0]}
}

// Push offers x. When the heap already holds k items, the one that ranks
// last of them and x leaves and is returned, with true.
func (t *Heap[T]) Push(x T) (out T, left bool) {
	if len(t.h) < t.k {
		t.h = append(t.h, x)
		t.up(len(t.h) - 1)
		return out, false
	}
	if len(t.h) == 0 || t.cmp(x, t.h[0]) >= 0 {
		return x, true
	}
	out, t.h[0] = t.h[0], x
	t.down(0)
	return out, true
}

// Sorted returns the items kept, first first. It sorts the heap's own
// storage: push nothing more.
func (t *Heap[T]) Sorted() []T {
	slices.SortFunc(t.h, t.cmp)
	return t.h
}

// up and down keep the last-ranked item at h[0].
func (t *Heap[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if t.cmp(t.h[parent], t.h[i]) >= 0 {
			return
		}
		t.h[parent], t.h[i] = t.h[i], t.h[parent]
		i = parent
	}
}

func (t *Heap[T]) down(i int) {
	for {
		last, l, r := i, 2*i+1, 2*i+2
		if l < len(t.h) && t.cmp(t.h[last], t.h[l]) < 0 {
			last = l
		}
		if r < len(t.h) && t.cmp(t.h[last], t.h[r]) < 0 {
			last = r
		}
		if last == i {
			return
		}
		t.h[i], t.h[last] = t.h[last], t.h[i]
		i = last
	}
}
