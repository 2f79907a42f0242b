package uplink

import (
	"testing"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func seqs(rs []*nbsv1.Report) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.GetSequence()
	}
	return out
}

func TestOutboxKeepsUnackedInOrderAndDropsOldestWhenFull(t *testing.T) {
	o := NewOutbox(3)
	_, changed := o.After(0)
	for s := uint64(1); s <= 4; s++ {
		o.Add(&nbsv1.Report{Sequence: s})
	}
	select {
	case <-changed:
	default:
		t.Fatal("Add did not signal a waiting sender")
	}
	if got, _ := o.After(0); len(got) != 3 || got[0].GetSequence() != 2 {
		t.Fatalf("after 4 adds into 3 slots: %v, want [2 3 4]", seqs(got))
	}
	if o.Dropped() != 1 {
		t.Errorf("dropped %d, want 1", o.Dropped())
	}
	o.Ack(3)
	o.Ack(99) // unknown: ignored
	if got, _ := o.After(0); len(got) != 2 || got[0].GetSequence() != 2 || got[1].GetSequence() != 4 {
		t.Fatalf("after ack 3: %v, want [2 4]", seqs(got))
	}
	if got, _ := o.After(2); len(got) != 1 || got[0].GetSequence() != 4 {
		t.Fatalf("After(2) = %v, want [4]", seqs(got))
	}
}
