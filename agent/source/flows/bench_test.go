package flows

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"net/netip"

	"github.com/nbs-project/nbs/agent/owner"
	probe "github.com/nbs-project/nbs/agent/probe/flows"
)

// BenchmarkEdges is the Go side of one interval with the kernel's edge
// table full (16,384 edges of one owner), folded to the default top 200:
//
//	go test -run '^$' -bench Edges ./agent/source/flows/
func BenchmarkEdges(b *testing.B) {
	self, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		b.Skip(err)
	}
	ino, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(self, "net:["), "]"), 10, 32)
	var iv probe.Interval
	local := netip.MustParseAddr("10.0.0.1")
	for i := range probe.DefaultMaxEdges {
		peerAddr := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		iv.Edges = append(iv.Edges, probe.Edge{
			Key: probe.Key{Netns: uint32(ino), Role: probe.Client, Local: local, Peer: peerAddr, PeerPort: 443},
			Counts: probe.Counts{Opened: uint64(i % 7), Closed: uint64(i % 5), Retransmits: uint64(i % 3), BytesSent: uint64(i),
				RTTCount: 1, RTTSum: time.Millisecond, RTTBuckets: map[uint32]uint64{uint32(200 + i%40): 1},
				ResetsSent: map[uint32]uint64{uint32(i % 4): 1}},
		})
	}
	s := &Source{resolver: owner.New(owner.Options{}), top: DefaultTop}
	s.edges(iv, nil) // the owner is looked up once
	b.ReportAllocs()
	for b.Loop() {
		out, _ := s.edges(iv, nil)
		if len(out) != DefaultTop+1 {
			b.Fatalf("%d edges, want %d", len(out), DefaultTop+1)
		}
	}
	b.ReportMetric(float64(len(iv.Edges)), "edges")
}
