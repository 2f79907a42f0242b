package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// The folds equal a raw recomputation: random streams of current, late
// (hours old, as a spool replays them) and resent reports, crossing
// minute, hour and day boundaries, with folds between them that are
// cancelled or lose their connection part way, and writers storing
// reports while a fold runs. After every step, what a read returns at
// each resolution is what the raw reports make; at the end, after one
// last fold, so is every stored row.
//
// Which reports carry a histogram varies: batches with none, as a healthy
// fleet's, store their pending keys by another statement (moveStaged).
func TestFoldsEqualRawRecomputation(t *testing.T) {
	for _, c := range []struct {
		name  string
		seed  uint64
		hists func(k int64) bool
	}{
		{"all with histograms", 1, nil},
		{"all with histograms", 2, nil},
		{"some with histograms", 3, func(k int64) bool { return k%3 == 0 }},
		{"none with histograms", 4, func(int64) bool { return false }},
	} {
		t.Run(c.name, func(t *testing.T) { foldProperty(t, c.seed, c.hists) })
	}
}

func foldProperty(t *testing.T, seed uint64, hists func(k int64) bool) {
	t.Logf("seed %d", seed)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x6e6273))
	st := openTest(t)
	f := newFoldFleet(t, st, 3)
	f.hists = hists
	const day = 24 * time.Hour
	// Two hours before a midnight two days ago: the run crosses it.
	start := time.Now().UTC().Truncate(day).Add(-day - 2*time.Hour)
	if err := st.SetFoldWatermark(ctx, RollupHour, start); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFoldWatermark(ctx, RollupDay, start.Truncate(day)); err != nil {
		t.Fatal(err)
	}
	// No minute folded yet: the fold inserts the rows of minutes it has
	// not reached before without a conflict check, and adds to the others
	// (late reports, and a node whose reports a chunk cut in two).
	if err := st.SetFoldWatermark(ctx, RollupMinute, start); err != nil {
		t.Fatal(err)
	}

	var sent []Report // for resends
	write := func(batch []Report) {
		if len(batch) == 0 {
			return
		}
		if _, err := st.WriteReports(ctx, batch); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, batch...)
	}
	// next is a step's batch: every node's reports up to now, some late
	// ones anywhere since the start, and some resends.
	var cursor = start
	next := func(now time.Time) []Report {
		var batch []Report
		for ; cursor.Before(now); cursor = cursor.Add(20 * time.Second) {
			for _, n := range f.nodes {
				if rng.IntN(10) > 0 { // some stay in a spool for later
					batch = append(batch, f.report(n, cursor.Add(time.Duration(rng.IntN(20))*time.Second)))
				}
			}
		}
		for range rng.IntN(6) {
			late := start.Add(time.Duration(rng.Int64N(int64(now.Sub(start)))))
			batch = append(batch, f.report(f.nodes[rng.IntN(len(f.nodes))], late))
		}
		for range rng.IntN(6) {
			if len(sent) > 0 {
				batch = append(batch, sent[rng.IntN(len(sent))])
			}
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		return batch
	}
	check := func(what string, now time.Time) {
		t.Helper()
		for _, res := range []int32{RollupMinute, RollupHour, RollupDay} {
			got, raw := f.read(t, res, start.Truncate(day), now.Add(2*day))
			same(t, what+": reads", got, raw)
		}
	}

	var interrupted, killed, folds int
	now := start
	for now.Before(start.Add(5 * time.Hour)) {
		now = now.Add(time.Duration(1+rng.IntN(25)) * time.Minute)
		write(next(now))
		// A fold, sometimes with a writer storing reports meanwhile,
		// sometimes cancelled or its connection killed part way.
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var during []Report
		if rng.IntN(2) == 0 {
			during = next(now)
			wg.Go(func() {
				if _, err := st.WriteReports(ctx, during); err != nil {
					t.Error(err)
				}
			})
		}
		mode := rng.IntN(4)
		delay := time.Duration(rng.IntN(40)) * time.Millisecond
		switch mode {
		case 1:
			time.AfterFunc(delay, cancel)
		case 2:
			wg.Go(func() {
				time.Sleep(delay)
				// The fold's session is the one holding the fold lock.
				var n int
				if err := st.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
					WHERE locktype = 'advisory' AND objid = $1 AND granted`, int64(foldLockID)).Scan(&n); err != nil {
					t.Error(err)
				}
				if n > 0 {
					killed++
				}
			})
		}
		r, err := st.FoldRollups(fctx, FoldOptions{Now: now, NodesPerStatement: 2, ReportsPerFold: 1 + rng.IntN(300)})
		wg.Wait()
		cancel()
		if mode == 1 || mode == 2 {
			// A terminated session (killed, or closed by a cancelled
			// fold that could not unlock) holds its lock until its
			// backend has exited; the next fold would find it busy.
			waitFoldLockFree(t, st)
		}
		sent = append(sent, during...)
		switch {
		case err != nil && (mode == 1 || mode == 2):
			interrupted++
			if mode == 1 && !errors.Is(err, context.Canceled) {
				t.Logf("cancelled fold: %v", err)
			}
		case err != nil:
			t.Fatalf("fold at %s: %v", now, err)
		case r.Busy:
			t.Fatalf("fold at %s busy with no other folding", now)
		default:
			folds++
		}
		check("after a fold at "+now.Format(time.RFC3339), now)
	}
	// The spool's last reports, then a fold once everything closed.
	write(next(now.Add(time.Minute)))
	end := now.Add(2 * day)
	r := f.fold(t, end)
	t.Logf("%d folds completed, %d interrupted (%d connections killed); the last %+v", folds, interrupted, killed, r)
	if interrupted == 0 || folds == 0 {
		t.Errorf("%d folds interrupted, %d completed: the test checks neither crash nor fold", interrupted, folds)
	}
	if n := f.pending(t); n != 0 {
		t.Errorf("%d reports pending after the last fold", n)
	}
	check("after the last fold", end)
	for _, res := range []int32{RollupMinute, RollupHour, RollupDay} {
		_, raw := f.read(t, res, start.Truncate(day), end)
		same(t, "stored rows", f.stored(t, res, start.Truncate(day), end), raw)
	}
}

func waitFoldLockFree(t *testing.T, st *Store) {
	t.Helper()
	for range 500 {
		var held bool
		if err := st.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_locks
			WHERE locktype = 'advisory' AND objid = $1 AND granted)`, int64(foldLockID)).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if !held {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the fold lock is still held 5 s after its session was terminated")
}

// Incidents' non-OK minutes are the same before, between and after folds:
// minutes with reports not folded yet are their stored rows and theirs.
func TestBadMinutesWithPendingReports(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	f := newFoldFleet(t, st, 2)
	start := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	end := start.Add(40 * time.Minute)
	f.write(t, start, end)
	bad := func(t *testing.T) []string {
		t.Helper()
		rows, err := st.BadMinutes(ctx, f.nodes, start.Add(-time.Minute), end.Add(time.Minute), 100000)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(rows); i++ {
			if rows[i].TS.Before(rows[i-1].TS) {
				t.Fatalf("non-OK minutes out of order: %s after %s", rows[i].TS, rows[i-1].TS)
			}
		}
		return rowsOf(rows, nil)
	}
	// The raw path's non-OK minutes, the reference.
	raw := func(t *testing.T) []string {
		t.Helper()
		s, _, err := st.ReadRollups(ctx, RollupQuery{NodeIDs: f.nodes, Res: RollupMinute, From: start, To: end, Raw: true})
		if err != nil {
			t.Fatal(err)
		}
		return rowsOf(slices.DeleteFunc(s, func(r SampleRow) bool { return r.Warn == 0 && r.Crit == 0 }), nil)
	}
	same(t, "before any fold", bad(t), raw(t))
	if from, ok, err := st.UnfoldedFrom(ctx); err != nil || !ok || !from.Equal(start) {
		t.Errorf("unfolded from %s (%v, %v) before any fold, want %s", from, ok, err, start)
	}
	// Folded up to the middle of a minute: its first reports are folded,
	// the rest not; then a late report into a folded minute.
	f.fold(t, start.Add(20*time.Minute+30*time.Second+MinuteGrace))
	same(t, "folded up to the middle", bad(t), raw(t))
	if from, ok, err := st.UnfoldedFrom(ctx); err != nil || !ok || !from.Equal(start.Add(20*time.Minute)) {
		t.Errorf("unfolded from %s (%v, %v), want %s", from, ok, err, start.Add(20*time.Minute))
	}
	late := raw(t)
	f.write(t, start.Add(5*time.Minute+10*time.Second), start.Add(5*time.Minute+11*time.Second))
	if slices.Equal(late, raw(t)) {
		t.Fatal("the late report changed no non-OK minute; the test checks nothing")
	}
	same(t, "with a late report not folded", bad(t), raw(t))
	f.fold(t, end.Add(time.Hour))
	if f.pending(t) != 0 {
		t.Fatalf("%d reports pending after the last fold", f.pending(t))
	}
	same(t, "after the folds", bad(t), raw(t))
	if from, ok, err := st.UnfoldedFrom(ctx); err != nil || ok {
		t.Errorf("unfolded from %s (%v, %v) with nothing pending", from, ok, err)
	}
}

// A minute rollup the fold has not written but finds stored (a collector
// older than migration 024 writing minute rollups itself, or any other
// writer) fails the fold's plain insert; the fold writes the chunk again,
// adding to what is stored, and counts every report once.
func TestFoldAddsToMinutesItDidNotWrite(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	f := newFoldFleet(t, st, 3)
	at := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	if err := st.SetFoldWatermark(ctx, RollupMinute, at); err != nil {
		t.Fatal(err)
	}
	f.write(t, at, at.Add(2*time.Minute))
	// Another writer's rows for node 1's first minute: a report of the
	// same shape, written as minute rollups only.
	other := NewRollups()
	other.Add(f.report(f.nodes[1], at.Add(30*time.Second)), RollupMinute)
	if err := st.SeedRollups(ctx, other); err != nil {
		t.Fatal(err)
	}
	r, err := st.FoldRollups(ctx, FoldOptions{Now: at.Add(2*time.Minute + MinuteGrace), ReportsPerFold: 4})
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	if want := 3 * 6; r.Reports != want || f.pending(t) != 0 {
		t.Fatalf("fold took %d reports and left %d, want %d and 0", r.Reports, f.pending(t), want)
	}
	// Stored: what the raw path makes, and the other writer's rows added.
	paths, err := st.metricPaths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rawS, rawH, err := st.ReadRollups(ctx, RollupQuery{NodeIDs: f.nodes, Res: RollupMinute, From: at, To: at.Add(2 * time.Minute), Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	otherS, otherH := other.rows(paths, nil)
	want := rowsOf(mergeSamples(append(rawS, otherS...)), mergeHistograms(append(rawH, otherH...)))
	same(t, "stored minute rollups", f.stored(t, RollupMinute, at, at.Add(2*time.Minute)), want)
	if slices.Equal(want, rowsOf(rawS, rawH)) {
		t.Fatal("the other writer's rows changed nothing; the test checks nothing")
	}
}

// The fold's minute watermark is the start of its minute: migration 024
// set it to the moment it ran, and no fold had written that minute, so its
// rows are plain inserts (foldPendingSamples), not upserts.
func TestFreshMinutesStartAtTheWatermarksMinute(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	at := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	for _, tc := range []struct {
		name      string
		watermark time.Time
	}{
		{"aligned", at},
		{"inside the minute, as migration 024 set it", at.Add(37*time.Second + 250*time.Millisecond)},
		{"at its last microsecond", at.Add(time.Minute - time.Microsecond)},
	} {
		if err := st.SetFoldWatermark(ctx, RollupMinute, tc.watermark); err != nil {
			t.Fatal(err)
		}
		got, err := readFreshMinutes(ctx, st.pool)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(at) {
			t.Errorf("%s: fresh minutes from %s, want %s", tc.name, got.UTC(), at)
		}
	}
}
