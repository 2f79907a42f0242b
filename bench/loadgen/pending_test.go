package loadgen

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

// A node keeps only what rebuilds an unacknowledged report, and a resend
// rebuilds it exactly: the same samples, histograms, evidence and
// announcements, whatever the node drew or sent since. Healthy and
// troubled nodes, snapshots, and reports that announce the day's pods.
func TestPendingRebuildsTheReport(t *testing.T) {
	for _, tc := range []struct {
		troubled bool
		pods     int
	}{{false, 0}, {true, 0}, {false, 3}, {true, 3}} {
		t.Run(fmt.Sprintf("troubled=%v,pods=%d", tc.troubled, tc.pods), func(t *testing.T) {
			now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
			f, err := New(Config{Addr: "unused", Nodes: 1, PodsPerDay: tc.pods, SnapshotEvery: 30 * time.Second, Seed: 5,
				Clock: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			pcg := rand.NewPCG(5, 1)
			n := &node{f: f, name: "sim-1", pcg: pcg, rng: rand.New(pcg), troubled: tc.troubled}
			n.start()
			announced := map[string]bool{}
			type sent struct {
				p pending
				r []byte
			}
			var all []sent
			var snapshots, announcing, events int
			for i := range 12 {
				if i%5 == 0 {
					n.newPods(now.Add(time.Duration(i) * 24 * time.Hour))
				}
				p, r := n.report(now.Add(time.Duration(i)*10*time.Second), announced)
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				if p.items != len(r.Samples)+len(r.Histograms) || p.items == 0 {
					t.Fatalf("report %d: %d items recorded, %d in it", p.seq, p.items, len(r.Samples)+len(r.Histograms))
				}
				all = append(all, sent{p, b})
				if r.Snapshot {
					snapshots++
				}
				if len(r.NewMetrics) > 0 {
					announcing++
				}
				events += len(r.Events)
			}
			if snapshots == 0 || tc.pods > 0 && announcing == 0 || tc.troubled != (events > 0) {
				t.Fatalf("%d snapshots, %d reports announcing pods, %d events: the reports do not cover the cases", snapshots, announcing, events)
			}
			// Rebuild in reverse, twice, as resends after two reconnects do.
			for range 2 {
				for i := len(all) - 1; i >= 0; i-- {
					p := all[i].p
					b, err := proto.MarshalOptions{Deterministic: true}.Marshal(n.build(p, rand.New(&p.rng)))
					if err != nil {
						t.Fatal(err)
					}
					if string(b) != string(all[i].r) {
						t.Fatalf("report %d rebuilt differs from the one sent (%d bytes, sent %d)", p.seq, len(b), len(all[i].r))
					}
				}
			}
		})
	}
}
