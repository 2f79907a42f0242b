package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/retention"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// A fleet that churns nodes and names new pods every day leaves the
// collector's storage level once the retentions have passed: each
// catalogue table ends within what its retention window can hold (the
// bound below), and no larger than a few days before the end, while the
// fleet named ever more nodes and paths. Nine days of two seconds each.
func TestStorageLevelsOff(t *testing.T) {
	const (
		nodes, pods, days = 10, 3, 9
		churn             = 0.2
	)
	cfg := Config{DBURL: pgcluster.Database(t), Nodes: nodes, Days: days, DayEvery: 2 * time.Second,
		Interval: 250 * time.Millisecond, ChurnPerDay: churn, PodsPerDay: pods, Troubled: 0.2, Seed: 3,
		Retention: retention.Config{Raw: day, Rollup1m: day, Rollup1h: 2 * day, Nodes: 2 * day, Alerts: 30 * day, Audit: 30 * day}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	out, err := Run(ctx, cfg, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	last, before := out[len(out)-1], out[len(out)-4]
	ever := last.NodesEver
	if last.Fleet.Pods < uint64(days-1)*nodes*pods || ever <= nodes {
		t.Fatalf("the fleet named %d pods and %d nodes in %d days: not the churn simulated", last.Fleet.Pods, ever, days)
	}
	// Windows in days, from a pod's day to the pass that deletes it: out
	// of the latest values after Raw, its definition after the catalogue
	// retention, its path a grace day later; a node after Nodes.
	const podDays, nodeDays = 2 + 2 + 1 + 1, 2 + 1
	maxNodes := int64(nodes + float64(nodes)*churn*nodeDays*2)
	treeSize := int64(250)
	for _, c := range []struct {
		what      string
		got, max  int64
		was, grew int64 // the same some days before; by how much the fleet's naming grew since
	}{
		// Churn is random: the count of nodes wanders under its bound.
		{"nodes", last.Tables["nodes"].Rows, maxNodes, -1, 0},
		{"pods' metric paths", last.PodPaths, podDays * pods * maxNodes, before.PodPaths, int64(last.Fleet.Pods - before.Fleet.Pods)},
		{"metric_defs", last.Tables["metric_defs"].Rows, treeSize + podDays*pods*maxNodes, before.Tables["metric_defs"].Rows, int64(last.Fleet.Pods - before.Fleet.Pods)},
		{"node_metrics", last.Tables["node_metrics"].Rows, last.Tables["nodes"].Rows * (treeSize + podDays*pods), -1, 0},
		{"node_latest", last.Tables["node_latest"].Rows, last.Tables["nodes"].Rows, -1, 0},
		// Every simulated hour is late by the real clock, so writers mark
		// them all; each midnight's fold takes the marks it recomputes.
		{"rollup_dirty", last.Tables["rollup_dirty"].Rows, 4 * 24 * maxNodes, before.Tables["rollup_dirty"].Rows + 24*maxNodes, 0},
	} {
		if c.got > c.max {
			t.Errorf("%s: %d after %d days, more than the retention windows hold (%d)", c.what, c.got, days, c.max)
		}
		// One day's naming of slack: a pass and the fleet's day race.
		if c.was >= 0 && c.got > c.was+c.grew/3 {
			t.Errorf("%s: %d on day %d, %d on day %d, while the fleet named %d more: still growing", c.what, c.got, last.N, c.was, before.N, c.grew)
		}
	}
	// Raw data: the partitions of at most Raw plus today and tomorrow.
	if b, a := last.Tables["reports"].Bytes, before.Tables["reports"].Bytes; float64(b) > 1.5*float64(a) {
		t.Errorf("reports: %d bytes on day %d, %d on day %d: still growing", b, last.N, a, before.N)
	}
	if last.DBBytes > 2*before.DBBytes {
		t.Errorf("database: %d bytes on day %d, %d on day %d", last.DBBytes, last.N, before.DBBytes, before.N)
	}
	var expired, pruned int
	for _, d := range out {
		expired += d.Pass.ExpiredNodes
		pruned += int(d.Pass.MetricPaths)
	}
	if expired == 0 || pruned == 0 {
		t.Errorf("over %d days the passes expired %d nodes and collected %d paths: the lifecycle did not run", days, expired, pruned)
	}
}

// BenchmarkCompressedMonth runs the month of BENCHMARKS.md ("Storage
// lifecycle") and prints its table: NBS_LIFECYCLE_NODES nodes (default
// 100) reporting every second, 38 days of 8 s, 5% of the nodes replaced and 5 new pods per node
// every day, with retentions of a week (two for hour rollups).
//
//	go test -run '^$' -bench CompressedMonth -benchtime 1x -timeout 30m ./bench/lifecycle/
func BenchmarkCompressedMonth(b *testing.B) {
	nodes := 100
	if v := os.Getenv("NBS_LIFECYCLE_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("NBS_LIFECYCLE_NODES=%q: want a number of nodes", v)
		}
		nodes = n
	}
	cfg := Config{DBURL: pgcluster.Database(b), Nodes: nodes, Days: 38, DayEvery: 8 * time.Second,
		Interval: time.Second, ChurnPerDay: 0.05, PodsPerDay: 5, Troubled: 0.05, Seed: 1,
		Retention: retention.Config{Raw: 7 * day, Rollup1m: 7 * day, Rollup1h: 14 * day, Nodes: 7 * day, Alerts: 30 * day, Audit: 30 * day}}
	for b.Loop() {
		out, err := Run(context.Background(), cfg, os.Stderr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Print(Markdown(out))
		last := out[len(out)-1]
		b.ReportMetric(float64(last.DBBytes)/(1<<20), "db-MiB")
		b.ReportMetric(float64(last.Tables["metric_paths"].Rows), "metric_paths")
		b.ReportMetric(float64(last.Fleet.Pods), "pods-ever")
	}
}

// Markdown is the days as the table of BENCHMARKS.md.
func Markdown(days []Day) string {
	var s strings.Builder
	s.WriteString("| day | nodes (ever) | metric_paths (of pods; pods ever) | metric_defs | node_metrics | node_latest | reports+histograms+events | rollups | audit_log | database | pass |\n")
	s.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, d := range days {
		t := d.Tables
		fmt.Fprintf(&s, "| %d | %d (%d) | %d (%d; %d) | %d | %d rows, %s | %s | %s | %s | %d | %s | %d ms |\n", d.N,
			t["nodes"].Rows, d.NodesEver, t["metric_paths"].Rows, d.PodPaths, d.Fleet.Pods, t["metric_defs"].Rows,
			t["node_metrics"].Rows, MiB(t["node_metrics"].Bytes), MiB(t["node_latest"].Bytes),
			MiB(t["reports"].Bytes+t["histograms"].Bytes+t["events"].Bytes),
			MiB(t["rollup_samples"].Bytes+t["rollup_histograms"].Bytes), t["audit_log"].Rows, MiB(d.DBBytes), d.Pass.Took.Milliseconds())
	}
	return s.String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
