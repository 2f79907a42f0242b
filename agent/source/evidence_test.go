package source

import (
	"context"
	"log/slog"
	"testing"
	"time"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// TestEvidence: the reader outlives the context it was started with and
// ends at Stop; an interval keeps at most max events, and Take hands each
// event out once.
func TestEvidence(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	cancel() // the agent's start-up context may end; the reader must not
	batch := make(chan int)
	started := make(chan error, 1)
	e := StartEvidence(ctx, "test", slog.New(slog.DiscardHandler), 3, func(ctx context.Context, add func(*nbsv1.Event)) error {
		if ctx.Err() != nil || ctx.Value(key{}) != "v" {
			started <- ctx.Err()
		}
		close(started)
		for {
			select {
			case <-ctx.Done():
				return nil
			case n := <-batch:
				for range n {
					add(&nbsv1.Event{MetricId: "x"})
				}
				batch <- 0 // done
			}
		}
	}, nil)
	if err, ok := <-started; ok {
		t.Fatalf("reader started with an ended context or without its values: %v", err)
	}
	send := func(n int) {
		batch <- n
		<-batch
	}
	var kept, capped uint64
	for _, c := range []struct{ add, want int }{{5, 3}, {0, 0}, {2, 2}, {4, 3}} {
		send(c.add)
		if got := len(e.Take()); got != c.want {
			t.Errorf("added %d, took %d, want %d", c.add, got, c.want)
		}
		kept, capped = kept+uint64(c.want), capped+uint64(c.add-c.want)
		if k, cp := e.Counts(); k != kept || cp != capped {
			t.Errorf("after adding %d: Counts() = %d kept, %d capped, want %d, %d", c.add, k, cp, kept, capped)
		}
	}
	stopped := make(chan struct{})
	go func() { e.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopWait / 2):
		t.Fatal("Stop did not end the reader")
	}
	select {
	case <-e.done:
	default:
		t.Error("Stop returned before the reader ended")
	}
}

// The default cap is what the kernel's bucket lets through in an interval
// and 2 s of jitter, never above the report's share.
func TestEvidencePerInterval(t *testing.T) {
	for _, c := range []struct {
		perSec   uint32
		interval time.Duration
		want     int
	}{
		{20, 10 * time.Second, 240},
		{1, 100 * time.Millisecond, 2},
		{20, time.Minute, MaxEvidencePerInterval},
		{0, 10 * time.Second, 0},
	} {
		if got := EvidencePerInterval(c.perSec, c.interval); got != c.want {
			t.Errorf("EvidencePerInterval(%d, %s) = %d, want %d", c.perSec, c.interval, got, c.want)
		}
	}
}
