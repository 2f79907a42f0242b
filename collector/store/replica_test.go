package store

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

// Series and events read through Reads come from a real streaming standby:
// with the primary stopped they are still answered while writes fail; with
// the standby stopped and the primary back they are answered by the
// primary.
func TestReadsFromAStandby(t *testing.T) {
	ctx := context.Background()
	dir := pgcluster.ClusterDir(t)
	primaryOpts := pgcluster.Options{Dir: filepath.Join(dir, "primary")}
	primary, err := pgcluster.Start(ctx, primaryOpts)
	if err != nil {
		t.Fatalf("start the primary: %v", err)
	}
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })
	standby, err := primary.StartStandby(ctx, pgcluster.Options{Dir: filepath.Join(dir, "standby")})
	if err != nil {
		t.Fatalf("start the standby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })

	log := slog.New(slog.DiscardHandler)
	st, err := Open(ctx, primary.URL(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	node, err := st.UpsertNode(ctx, Node{Name: "n1", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "drops", Title: "Drops", Kind: KindRate}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	if _, err := st.WriteReports(ctx, []Report{{NodeID: node, InstanceID: 1, Seq: 1, Time: t0, Received: t0, IntervalMS: 1000,
		Samples: []Sample{{Path: "drops", MetricID: ids["drops"], Value: 42}},
		Events:  []Event{{Path: "drops", MetricID: ids["drops"], Time: t0, Fields: map[string]string{"reason": "NO_SOCKET"}}}}}); err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := st.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	replica, err := OpenReadPool(ctx, standby.URL(), ReadPool{Size: 2, StatementTimeout: 30 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Close)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var replayed bool
		if err := replica.pool.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&replayed); err != nil {
			t.Fatal(err)
		}
		if replayed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby did not replay the writes within 30s")
		}
	}
	heavy, err := OpenReadPool(ctx, primary.URL(), ReadPool{Size: 2, StatementTimeout: 30 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(heavy.Close)
	reads := NewReads(st, heavy, replica, ReadPool{Size: 2, StatementTimeout: 30 * time.Second}, log)

	read := func(from string) {
		t.Helper()
		b, err := reads.Series(ctx, node, "drops", t0.Add(-time.Minute), t0.Add(time.Minute), time.Hour)
		if err != nil || len(b) != 1 || b[0].Sum != 42 {
			t.Fatalf("series read from the %s = %+v, %v; want one bucket of 42", from, b, err)
		}
		ev, err := reads.Events(ctx, node, "drops", t0.Add(-time.Minute), t0.Add(time.Minute), 10)
		if err != nil || len(ev) != 1 || ev[0].Fields["reason"] != "NO_SOCKET" {
			t.Fatalf("events read from the %s = %+v, %v; want the one stored", from, ev, err)
		}
	}
	read("standby")
	if err := primary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	read("standby, with the primary stopped")
	if _, err := st.UpsertNode(ctx, Node{Name: "n2", InstanceID: 2, IntervalMS: 1000}); err == nil {
		t.Fatal("a write with the primary stopped succeeded")
	}
	if reads.down.Load() {
		t.Fatal("reads went to the primary while the standby answered")
	}

	if err := standby.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	primaryOpts.Port = primary.Port()
	if _, err := pgcluster.Start(ctx, primaryOpts); err != nil {
		t.Fatalf("restart the primary: %v", err)
	}
	read("primary, with the standby stopped")
	if !reads.down.Load() {
		t.Fatal("the standby is stopped but reads did not notice")
	}
}
