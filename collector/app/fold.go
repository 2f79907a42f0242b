package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// folder runs the rollup fold (store.FoldRollups): minute rollups from the
// reports stored since the last fold, hour rollups from the minutes of
// closed hours, day rollups from the hours of closed days, and hours
// marked dirty by late reports. Every collector runs one; the store lets
// one fold at a time (a session advisory lock held for the whole fold, so
// the fold's leader is whoever holds it, and a collector that dies
// releases it with its session) and the others find it busy, so a
// collector that dies delays nothing by more than a period. Every 15 s:
// what is not folded is read from raw rows by every report, so the
// fold keeps that to about a minute of the fleet's reports.
type folder struct {
	st    *store.Store
	log   *slog.Logger
	every time.Duration
	// now is the fold's clock; nil takes PostgreSQL's, which writers mark
	// late data by. Tests move it instead of waiting for hours to close.
	now  func() time.Time
	opts store.FoldOptions
}

func (c *Collector) folder(st *store.Store) folder {
	return folder{st: st, log: c.log.With("part", "fold"), every: 15 * time.Second,
		opts: store.FoldOptions{MinuteRetention: c.cfg.Retention.Rollup1m, HourRetention: c.cfg.Retention.Rollup1h}}
}

// run folds every period until ctx ends.
func (f folder) run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		f.once(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func (f folder) once(ctx context.Context) {
	o := f.opts
	if f.now != nil {
		o.Now = f.now()
	}
	start := time.Now()
	r, err := f.st.FoldRollups(ctx, o)
	if err != nil {
		if ctx.Err() == nil {
			// What was folded stays folded; the rest is retried next time.
			f.log.Warn("rollup fold", "err", err, "hours", r.Hours, "days", r.Days)
		}
		return
	}
	// Days folded before the report pre-aggregate existed get theirs a few
	// at a time (store.BackfillScopeDays): 4 days of 1,000 busy nodes are
	// about 2 s of the database's time every 15 s, until none is left.
	if n, err := f.st.BackfillScopeDays(ctx, o.Now, f.opts.HourRetention, 4); err != nil {
		if ctx.Err() == nil {
			f.log.Warn("report pre-aggregate backfill", "err", err, "days", n)
		}
	} else if n > 0 {
		f.log.Info("report pre-aggregate built for days folded before it", "days", n)
	}
	if r.Hours+r.Days+r.Recomputed+r.Skipped > 0 {
		f.log.Info("rollups folded", "hours", r.Hours, "days", r.Days, "late_hours_recomputed", r.Recomputed,
			"late_hours_skipped", r.Skipped, "hours_through", r.HourThrough, "days_through", r.DayThrough,
			"took", time.Since(start).Round(time.Millisecond))
	}
}
