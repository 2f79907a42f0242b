package store

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/migrations"
)

// A database that stored definitions per node (before migration 010) keeps
// every node's catalogue through the upgrade, with each distinct
// definition stored once, and a Hello after it finds them unchanged.
func TestMigrationSharesDefinitions(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgcluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := Migrate(ctx, pool, migrationsBefore(t, "010")); err != nil {
		t.Fatalf("migrate to 009: %v", err)
	}
	// The threshold as the collector before 010 wrote it: its Go encoding.
	thr, err := json.Marshal(Threshold{Warn: 5, Crit: 10, Comparison: "above"})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO nodes (name) VALUES ('old-1'), ('old-2')`,
		`INSERT INTO metric_paths (path) VALUES ('ping'), ('ping/peer')`,
		`INSERT INTO node_metrics (node_id, metric_id, title, unit, kind, description, default_threshold, scale, quantile)
		 SELECT n.id, p.id, initcap(p.path), 'ms', 3, 'about ' || p.path,
		        CASE WHEN p.path = 'ping' THEN $1::jsonb END, 1e6, 0.99
		 FROM nodes n, metric_paths p`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, string(thr))
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if n, err := Migrate(ctx, pool, migrations.FS); err != nil || n < 1 {
		t.Fatalf("migrate to the newest: applied %d, %v", n, err)
	}
	st, err := Open(ctx, pool.Config().ConnString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var defs, pairs int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM metric_defs), (SELECT count(*) FROM node_metrics)`).Scan(&defs, &pairs); err != nil {
		t.Fatal(err)
	}
	if defs != 2 || pairs != 4 {
		t.Fatalf("after the upgrade: %d definitions, %d pairs; want 2 and 4", defs, pairs)
	}
	node, err := st.NodeByName(ctx, "old-2")
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Definitions(ctx, node.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Path != "ping" || got[0].Title != "Ping" || got[0].Description != "about ping" || got[0].Scale != 1e6 ||
		got[0].DefaultThreshold == nil || got[0].DefaultThreshold.Crit != 10 || got[1].Path != "ping/peer" || got[1].DefaultThreshold != nil {
		t.Fatalf("old-2 reads %+v", got)
	}
	// The same definitions from a Hello map onto the migrated ones.
	if _, err := st.UpsertDefinitions(ctx, node.ID, got); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM metric_defs`).Scan(&defs); err != nil || defs != 2 {
		t.Fatalf("a Hello repeating the migrated definitions made %d definitions (%v), want 2", defs, err)
	}
}

// migrationsBefore is the migrations whose file names sort before first:
// the schema as an older collector left it, for a test of an upgrade.
func migrationsBefore(t *testing.T, first string) fstest.MapFS {
	t.Helper()
	before := fstest.MapFS{}
	err := fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".sql") || p >= first {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, p)
		before[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return before
}
