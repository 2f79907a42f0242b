package store

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/migrations"
)

// A database from before names were canonical keeps each node under its
// lower-case name; where a case variant met a node that already had the
// canonical name, the canonical one keeps it with its credential and
// bindings, and the variant is retired with its history and loses them.
func TestMigrationFoldsNodeNames(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgcluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	cut := slices.IndexFunc(names, func(n string) bool { return strings.HasSuffix(n, "_canonical_node_names.sql") })
	if cut < 0 {
		t.Fatal("no canonical_node_names migration")
	}
	if _, err := Migrate(ctx, pool, migrationsBefore(t, names[cut])); err != nil {
		t.Fatalf("migrate to %s: %v", names[cut-1], err)
	}
	for _, q := range []string{
		// node-a is the real node; NODE-A a look-alike heard more recently.
		`INSERT INTO nodes (name, last_hello) VALUES ('node-a', now() - interval '1 minute'), ('NODE-A', now())`,
		// Only variants of web-1: the most recently heard keeps the name.
		`INSERT INTO nodes (name, last_hello) VALUES ('Web-1', now() - interval '1 hour'), ('WEB-1', now())`,
		// A lone upper-case host name is simply folded.
		`INSERT INTO nodes (name) VALUES ('DB.Example.COM')`,
		`INSERT INTO node_credentials (node, state, secret_hash) VALUES
			('node-a', 'active', decode(repeat('aa', 32), 'hex')), ('NODE-A', 'active', decode(repeat('bb', 32), 'hex')),
			('DB.Example.COM', 'active', decode(repeat('cc', 32), 'hex'))`,
		`INSERT INTO node_bindings (node, labels, set_by) VALUES ('node-a', '{"customer":"acme"}', 'operator:x'), ('NODE-A', '{"customer":"evil"}', 'bootstrap:fleet')`,
		`INSERT INTO threshold_overrides (scope_kind, node, metric, threshold) VALUES
			('node', 'node-a', 'ping', '{"warn":1,"crit":2,"comparison":"above"}'),
			('node', 'NODE-A', 'ping', '{"warn":9,"crit":10,"comparison":"above"}'),
			('node', 'NODE-A', 'drops', '{"warn":3,"crit":4,"comparison":"above"}')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := Migrate(ctx, pool, migrations.FS); err != nil {
		t.Fatalf("migrate to the newest: %v", err)
	}
	type row struct {
		name    string
		retired bool
	}
	rows, err := pool.Query(ctx, `SELECT name, retired_at IS NOT NULL, last_hello FROM nodes ORDER BY name, last_hello`)
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for rows.Next() {
		var r row
		var ignored any
		if err := rows.Scan(&r.name, &r.retired, &ignored); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// By name, then last hello. node-a: the canonical row (older hello)
	// stays current, the variant (newer hello) is retired; web-1: the
	// variant heard last stays current.
	want := []row{{"db.example.com", false}, {"node-a", false}, {"node-a", true}, {"web-1", true}, {"web-1", false}}
	if !slices.Equal(got, want) {
		t.Errorf("nodes after the migration %v", got)
	}
	var current int32
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE name = 'node-a' AND retired_at IS NULL AND last_hello < now() - interval '30 seconds'`).Scan(&current); err != nil || current != 1 {
		t.Errorf("the real node-a is not the current row (%d, %v)", current, err)
	}
	var creds []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(node || ':' || encode(substr(secret_hash, 1, 1), 'hex') ORDER BY node) FROM node_credentials`).Scan(&creds); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(creds, []string{"db.example.com:cc", "node-a:aa"}) {
		t.Errorf("credentials after the migration %v", creds)
	}
	var tenant string
	if err := pool.QueryRow(ctx, `SELECT labels->>'customer' FROM node_bindings WHERE node = 'node-a'`).Scan(&tenant); err != nil || tenant != "acme" {
		t.Errorf("node-a's binding: %q, %v; want acme (the variant's must not win)", tenant, err)
	}
	var overrides []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(node || ' ' || metric || ' ' || (threshold->>'warn') ORDER BY metric) FROM threshold_overrides`).Scan(&overrides); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(overrides, []string{"node-a drops 3", "node-a ping 1"}) {
		t.Errorf("overrides after the migration %v", overrides)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO nodes (name) VALUES ('Upper')`); err == nil {
		t.Error("a non-canonical name was stored after the migration")
	}
}
