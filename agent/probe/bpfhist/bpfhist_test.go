package bpfhist

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nbs-project/nbs/agent/probe/bpfhist/lltest"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// testValues covers every bucket edge of the 64-bit range (each power of
// two and sub-bucket boundary, +-1), then random values: uniform over 64
// bits and log-uniform (the latencies programs actually see).
func testValues() []uint64 {
	var vs []uint64
	for v := uint64(0); v < 1024; v++ {
		vs = append(vs, v)
	}
	for e := uint(4); e < 64; e++ {
		for s := uint64(0); s < 16; s++ {
			lo := (16 + s) << (e - 4)
			vs = append(vs, lo-1, lo, lo+1)
		}
	}
	vs = append(vs, math.MaxUint64, math.MaxUint64-1, 1<<63, 1<<MaxBits-1, 1<<MaxBits)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 50000; i++ {
		vs = append(vs, rng.Uint64())
		vs = append(vs, rng.Uint64()>>rng.UintN(64))
	}
	return vs
}

// The kernel's index (bpf/include/loglinear.h, executed by the kernel with
// BPF_PROG_TEST_RUN) equals loglinear.Index for every value, and the
// kernel-map slot is the index clamped to the last bucket.
func TestKernelIndexEqualsGo(t *testing.T) {
	r, err := lltest.Load()
	if err != nil {
		netlab.SkipOrFail(t, "bpfhist: %v", err)
	}
	defer r.Close()
	vs := testValues()
	checked := 0
	for len(vs) > 0 {
		n := min(len(vs), lltest.Batch)
		idx, slot, err := r.Index(vs[:n])
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vs[:n] {
			want := loglinear.Index(v)
			if idx[i] != want {
				t.Fatalf("kernel index of %d = %d, Go says %d", v, idx[i], want)
			}
			wantSlot := min(want, Buckets-1)
			if slot[i] != wantSlot {
				t.Fatalf("kernel slot of %d = %d, want %d", v, slot[i], wantSlot)
			}
			checked++
		}
		vs = vs[n:]
	}
	t.Logf("%d values: kernel and Go agree", checked)
}

func TestBucketsMatchesHeader(t *testing.T) {
	// The last resolved value is 2^MaxBits - 1; one more is out of range.
	if got := loglinear.Index(1<<MaxBits - 1); got != Buckets-1 {
		t.Fatalf("Index(2^%d-1) = %d, want the last bucket %d", MaxBits, got, Buckets-1)
	}
	if got := loglinear.Index(1 << MaxBits); got != Buckets {
		t.Fatalf("Index(2^%d) = %d, want %d (first bucket beyond the map)", MaxBits, got, Buckets)
	}
}

func TestDelta(t *testing.T) {
	var d Delta
	var h Hist
	h[3], h[100] = 5, 2
	first := d.Next(h)
	if first.Count != 7 || first.Counts[3] != 5 || first.Counts[100] != 2 {
		t.Fatalf("first delta %+v", first)
	}
	h[3] += 4
	second := d.Next(h)
	if second.Count != 4 || second.Counts[3] != 4 || len(second.Counts) != 1 {
		t.Fatalf("second delta %+v", second)
	}
	var smaller Hist // the map was recreated
	smaller[7] = 1
	if third := d.Next(smaller); third.Count != 1 || third.Counts[7] != 1 {
		t.Fatalf("delta after a reset %+v", third)
	}
}
