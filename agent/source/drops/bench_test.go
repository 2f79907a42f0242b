package drops

import (
	"testing"

	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
)

func BenchmarkCollectKernel(b *testing.B) {
	h, err := netns.Resolve("")
	if err != nil {
		b.Fatal(err)
	}
	s := &Source{ns: h, kernel: newKernel()}
	for b.Loop() {
		r := source.Reading{Counters: map[string]uint64{}}
		if err := s.collectKernel(&r); err != nil {
			b.Fatal(err)
		}
	}
}
