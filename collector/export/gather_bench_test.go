package export_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/store"
)

// memSource is a fleet held in memory: what ExportNodes would read.
type memSource struct{ exp store.Export }

func (m memSource) ExportNodes(context.Context, store.Scope, time.Time) (store.Export, error) {
	return m.exp, nil
}

func (memSource) NamesOutside(context.Context, store.Scope, []string) ([]string, error) {
	return nil, nil
}

// BenchmarkGather builds the export of 10,000 nodes, each with six roots
// and 80 moving counters (drop reasons and their owners), and encodes it
// in the text format, without the database: the collector's share of a
// scrape.
//
//	go test -run '^$' -bench Gather -benchtime 3x ./collector/export/
func BenchmarkGather(b *testing.B) {
	now := time.Now()
	exp := store.Export{Now: now}
	for i := range 10000 {
		n := store.ExportNode{ID: int32(i + 1), Name: fmt.Sprintf("node-%05d", i), Tenant: "acme", AgentVersion: "v1", KernelRelease: "6.18", Last: now}
		for _, r := range []struct {
			path string
			kind store.Kind
		}{{"tcp_reset", store.KindRate}, {"drops", store.KindRate}, {"latency", store.KindRate}, {"ping", store.KindGauge}, {"agent", store.KindGauge}, {"dns", store.KindRate}} {
			m := store.ExportMetric{Path: r.path, Kind: r.kind, Unit: "ms", HasLatest: true, Latest: store.LatestValue{Value: 1, State: store.StateOK}}
			if r.kind == store.KindRate {
				m.Counter = &store.CounterTotal{Total: 100, Born: now.Add(-time.Hour), BornInc: 1}
			}
			n.Metrics = append(n.Metrics, m)
		}
		for j := range 80 {
			path := fmt.Sprintf("drops/reason_%02d", j%40)
			if j >= 40 {
				path += "/pod-" + fmt.Sprint(j)
			}
			n.Metrics = append(n.Metrics, store.ExportMetric{Path: path, Kind: store.KindRate, Counter: &store.CounterTotal{Total: 5, Born: now.Add(-time.Hour)}})
		}
		exp.Nodes = append(exp.Nodes, n)
	}
	e := export.New(memSource{exp}, export.DefaultConfig())
	var series int
	b.ResetTimer()
	for range b.N {
		snap, err := e.Gather(context.Background(), store.All{})
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range snap.Families {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
		series = snap.Stats.Series
	}
	b.ReportMetric(float64(series), "series")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(series), "ns/series")
}
