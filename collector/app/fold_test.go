package app

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// The fold job folds as its clock moves, and stops with its context.
func TestFolderRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Now().UTC().Truncate(time.Hour).Add(10 * time.Hour)
	if err := st.SetFoldWatermark(ctx, store.RollupHour, start); err != nil {
		t.Fatal(err)
	}
	// Each fold sees the clock an hour later.
	var tick atomic.Int64
	f := folder{st: st, log: slog.New(slog.DiscardHandler), every: 5 * time.Millisecond,
		now: func() time.Time { return start.Add(time.Duration(tick.Add(1))*time.Hour + store.FoldGrace) }}
	done := make(chan struct{})
	go func() { f.run(ctx); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := st.FoldRollups(ctx, store.FoldOptions{Now: start})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Busy && !r.HourThrough.Before(start.Add(3*time.Hour)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hours folded through %s after 20 s, want %s", r.HourThrough, start.Add(3*time.Hour))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fold job did not stop with its context")
	}
}
