package source

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/owner"
	"github.com/nbs-project/nbs/agent/source/sourcetest"
	"github.com/nbs-project/nbs/internal/schema"
)

// TestOwnersSplitExact drives the split with owners that come and go and
// checks, every collection, that the children's increases add up to the
// parent's exactly, that a parent never has more than top+1 children, and
// that an owner's child, once it has one, never counts backwards.
func TestOwnersSplitExact(t *testing.T) {
	// Fake inodes name no namespace: each is its own "inode:N" owner, which
	// is all the split needs to tell owners apart.
	res := owner.New(owner.Options{RescanEvery: time.Hour, MinScanGap: time.Microsecond, Proc: t.TempDir(), NetnsDirs: []string{}})
	const top = 3
	parent := catalog.ResetSentReason("no_socket")
	o := NewOwners(res, top)
	rng := rand.New(rand.NewPCG(1, 2))
	cum := map[uint32]uint64{}
	led := sourcetest.NewLedger(nil)
	var total uint64
	retired := 0
	for round := 0; round < 200; round++ {
		// A few busy owners that change every 40 rounds, a long tail of
		// small ones, and counts the kernel could not split (inode 0).
		phase := uint32(round / 40)
		for i := uint32(0); i < 3; i++ {
			cum[100+phase*10+i] += uint64(rng.IntN(50) + 20)
		}
		for i := 0; i < 4; i++ {
			cum[uint32(1000+rng.IntN(40))] += uint64(rng.IntN(3))
		}
		cum[0] += uint64(rng.IntN(2))
		snap := map[uint32]uint64{}
		total = 0
		for ino, v := range cum {
			snap[ino] = v
			total += v
		}
		r := Reading{Metrics: []catalog.Metric{parent}, Counters: map[string]uint64{parent.ID: total}}
		o.Split(&r, map[string]map[uint32]uint64{parent.ID: snap})
		retired += len(r.Retired)
		inc := led.Add(r.Counters, r.Retired)
		sum, children := sourcetest.ChildSum(inc, parent.ID)
		if sum != inc[parent.ID] {
			t.Fatalf("round %d: children add up to %d, parent grew %d", round, sum, inc[parent.ID])
		}
		if children > top+1 {
			t.Fatalf("round %d: %d children, bound %d", round, children, top+1)
		}
		for _, m := range r.Metrics {
			if err := schema.CheckID(m.ID); err != nil {
				t.Fatalf("child id %q: %v", m.ID, err)
			}
		}
	}
	// The busy owners of the last phase hold the places, and the earlier
	// ones were retired on the way.
	for i := uint32(0); i < 3; i++ {
		id := parent.ID + "/inode:" + itoa(100+4*10+i)
		if !led.Has(id) {
			t.Errorf("busy owner %s has no child", id)
		}
	}
	if retired == 0 {
		t.Errorf("no child was ever retired although the busy owners changed")
	}
}

// TestOwnersStable checks that a steady owner keeps its id, and that a
// newcomer only a little busier does not take its place.
func TestOwnersStable(t *testing.T) {
	res := owner.New(owner.Options{RescanEvery: time.Hour, MinScanGap: time.Microsecond, Proc: t.TempDir(), NetnsDirs: []string{}})
	parent := catalog.DropReason("no_socket")
	o := NewOwners(res, 1)
	cum := map[uint32]uint64{}
	for round := 0; round < 30; round++ {
		cum[7] += 10
		if round >= 10 {
			cum[8] += 15 // busier, but not twice as busy
		}
		snap := map[uint32]uint64{7: cum[7], 8: cum[8]}
		r := Reading{Metrics: []catalog.Metric{parent}, Counters: map[string]uint64{parent.ID: cum[7] + cum[8]}}
		o.Split(&r, map[string]map[uint32]uint64{parent.ID: snap})
		if len(r.Retired) > 0 {
			t.Fatalf("round %d: retired %v", round, r.Retired)
		}
		if got := r.Counters[parent.ID+"/inode:7"]; got != cum[7] {
			t.Fatalf("round %d: inode:7 child %d, want %d", round, got, cum[7])
		}
		if got := r.Counters[parent.ID+"/other"]; got != cum[8] {
			t.Fatalf("round %d: other %d, want %d", round, got, cum[8])
		}
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
