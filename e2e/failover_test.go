package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// A PostgreSQL primary with a synchronous streaming standby; the collector
// is given both in a multi-host URL with target_session_attrs=read-write.
// The primary crashes mid-stream, the standby is promoted 5 s later, and
// every reset made before, during and after is stored exactly once: what
// the collector acked was on the standby's disk, and what it had not acked
// the agent resent.
func TestFaultPostgresFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := pgcluster.ClusterDir(t)
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "primary"), Logger: testLogger(t, "pg-primary")})
	if err != nil {
		t.Fatalf("start the primary: %v", err)
	}
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })
	standby, err := primary.StartStandby(ctx, pgcluster.Options{Dir: filepath.Join(dir, "standby"), Logger: testLogger(t, "pg-standby")})
	if err != nil {
		t.Fatalf("start the standby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })
	if err := primary.RequireSynchronousStandby(ctx); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port(), pgcluster.DatabaseName)

	lab := netlab.New(t)
	col := startCollector(t, url, "127.0.0.1:0")
	startAgent(t, "lab-b", lab.B, col.grpcAddr)
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)

	resetsAtRate(t, lab, 5, 200*time.Millisecond)
	time.Sleep(interval) // a report of them is on its way or stored
	if err := primary.Crash(ctx); err != nil {
		t.Fatalf("crash the primary: %v", err)
	}
	resetsAtRate(t, lab, 5, time.Second) // 5 s with no writable database
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("promote the standby: %v", err)
	}
	resetsAtRate(t, lab, 5, 200*time.Millisecond)
	storedExactly(t, col, lab, b0, 15, 90*time.Second)
}
