package store

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAdmitNode: the node-limit check every Hello makes, with 20,000
// nodes registered, beside the count it replaced, in the same run:
//
//	go test -run '^$' -bench AdmitNode ./collector/store
func BenchmarkAdmitNode(b *testing.B) {
	ctx := context.Background()
	st := openTest(b)
	const nodes = 20_000
	if _, err := st.pool.Exec(ctx, `INSERT INTO nodes (name) SELECT 'n' || i FROM generate_series(1, $1) i`, nodes); err != nil {
		b.Fatal(err)
	}
	if _, err := st.pool.Exec(ctx, `ANALYZE nodes`); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		admit func(name string) error
	}{
		{"count every Hello (before)", func(name string) error {
			var total int
			var exists bool
			return st.pool.QueryRow(ctx, `SELECT count(*), coalesce(bool_or(name = $1), false) FROM nodes`, name).Scan(&total, &exists)
		}},
		{"AdmitNode", func(name string) error {
			_, _, err := st.AdmitNode(ctx, name, 10*nodes)
			return err
		}},
	} {
		for _, who := range []string{"known", "new"} {
			b.Run(fmt.Sprintf("%s/%s", c.name, who), func(b *testing.B) {
				name := "n17"
				if who == "new" {
					name = "not-yet"
				}
				for b.Loop() {
					if err := c.admit(name); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
