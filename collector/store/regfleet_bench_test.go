package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkRegisterFleet registers a fleet of new nodes (NBS_REGFLEET_NODES,
// default 20,000) with the agent's catalogue in the registrar's batches of
// 256, as a fleet's first Hellos are, and reports what each node cost in
// time and WAL over each fifth of the fleet: whether registering gets
// dearer as the fleet grows (BENCHMARKS.md, "Fleet").
func BenchmarkRegisterFleet(b *testing.B) {
	nodes := 20000
	if n, err := strconv.Atoi(os.Getenv("NBS_REGFLEET_NODES")); err == nil && n > 0 {
		nodes = n
	}
	const batchSize = 256
	ctx := context.Background()
	defs := agentCatalogue()
	hash := DefinitionsHash(defs)
	for range b.N {
		st := openTest(b)
		lsn := func() (n int64) {
			if err := st.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&n); err != nil {
				b.Fatal(err)
			}
			return n
		}
		seg := nodes / 5
		n := 0
		for part := range 5 {
			start, wal0 := time.Now(), lsn()
			for done := 0; done < seg; {
				size := min(batchSize, seg-done)
				batch := make([]Registration, size)
				for i := range batch {
					batch[i] = Registration{Node: Node{Name: fmt.Sprintf("reg-%d", n), InstanceID: 1, IntervalMS: 10000}, Defs: defs, Hash: hash}
					n++
				}
				for _, r := range st.RegisterNodes(ctx, batch, 1000) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				done += size
			}
			el, wal := time.Since(start), lsn()-wal0
			b.Logf("nodes %d-%d: %.2f ms a node, %.1f KiB of WAL a node", part*seg, (part+1)*seg, float64(el.Microseconds())/1000/float64(seg), float64(wal)/1024/float64(seg))
			b.ReportMetric(float64(el.Microseconds())/1000/float64(seg), fmt.Sprintf("ms/node-part%d", part))
		}
	}
}
