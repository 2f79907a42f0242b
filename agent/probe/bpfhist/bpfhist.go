// Package bpfhist reads the histograms NBS's BPF programs keep in kernel
// maps (struct nbs_hist of bpf/include/loglinear.h: per-CPU, cumulative, in
// the shared log-linear layout) and turns them into per-interval
// loglinear.Histograms.
package bpfhist

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// MaxBits is NBS_HIST_MAX_BITS: kernel histograms resolve values below
// 2^36 ns (68.7 s); larger ones land in the last bucket.
const MaxBits = 36

// Buckets is NBS_HIST_BUCKETS, the length of struct nbs_hist.
const Buckets = (MaxBits-loglinear.SubBits)*(1<<loglinear.SubBits) + 1<<loglinear.SubBits

// Hist is one struct nbs_hist.
type Hist [Buckets]uint64

// Lookup reads key from a per-CPU map of struct nbs_hist and sums the CPUs.
// ok is false when the key is absent.
func Lookup(m *ebpf.Map, key any) (h Hist, ok bool, err error) {
	h, err = bpfload.LookupSum[Hist](m, key)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("read histogram from %s: %w", m, err)
	}
	return h, true, nil
}

// Delta turns a cumulative kernel histogram into per-interval ones.
type Delta struct {
	prev Hist
	seen bool
}

// Next returns what cur added since the previous call (everything, on the
// first call). A bucket that went backwards (the map was recreated) counts
// from zero rather than making up counts.
func (d *Delta) Next(cur Hist) *loglinear.Histogram {
	h := loglinear.New()
	for b, n := range cur {
		var p uint64
		if d.seen {
			p = d.prev[b]
		}
		if n > p {
			h.AddBucket(uint32(b), n-p)
		}
	}
	d.prev, d.seen = cur, true
	return h
}

// Reset makes the next call of Next count from cur (use it to skip what
// accumulated while nobody was reading).
func (d *Delta) Reset(cur Hist) { d.prev, d.seen = cur, true }
