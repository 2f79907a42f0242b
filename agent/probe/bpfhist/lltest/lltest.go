package lltest

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Batch is how many values one run of the program indexes.
const Batch = 256

// Runner is the loaded test program.
type Runner struct{ objs lltestObjects }

// Load loads the program (it needs no attachment: it runs with
// BPF_PROG_TEST_RUN).
func Load() (*Runner, error) {
	r := &Runner{}
	if err := loadLltestObjects(&r.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load loglinear test program: %w\n%+v", err, ve)
		}
		return nil, fmt.Errorf("load loglinear test program: %w", err)
	}
	return r, nil
}

// Spec returns the object unloaded, for tests of loading itself: its
// global variables ll_in, ll_index and ll_slot are [Batch]uint64,
// [Batch]uint32 and [Batch]uint32.
func Spec() (*ebpf.CollectionSpec, error) { return loadLltest() }

// Index runs the kernel's nbs_ll_index and nbs_hist_slot on up to Batch values.
func (r *Runner) Index(vals []uint64) (index, slot []uint32, err error) {
	if len(vals) > Batch {
		return nil, nil, fmt.Errorf("%d values, at most %d per run", len(vals), Batch)
	}
	var in [Batch]uint64
	copy(in[:], vals)
	if err := r.objs.LlIn.Set(in); err != nil {
		return nil, nil, fmt.Errorf("set ll_in: %w", err)
	}
	if _, err := r.objs.NbsLlTest.Run(&ebpf.RunOptions{}); err != nil {
		return nil, nil, fmt.Errorf("run nbs_ll_test: %w", err)
	}
	var idx, sl [Batch]uint32
	if err := r.objs.LlIndex.Get(&idx); err != nil {
		return nil, nil, fmt.Errorf("get ll_index: %w", err)
	}
	if err := r.objs.LlSlot.Get(&sl); err != nil {
		return nil, nil, fmt.Errorf("get ll_slot: %w", err)
	}
	return idx[:len(vals)], sl[:len(vals)], nil
}

// Close frees the program and its maps.
func (r *Runner) Close() error { return r.objs.Close() }
