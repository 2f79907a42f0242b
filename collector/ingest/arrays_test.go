package ingest

import (
	"testing"

	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A healthy node's report (a dozen roots) never takes the arrays a
// troubled node's report (its tree and histograms) gave back: kept in one
// pool, every set grew to the largest report it had held.
func TestReportArraysKeptBySize(t *testing.T) {
	report := func(samples, hists, buckets int) *nbsv1.Report {
		r := &nbsv1.Report{}
		for range samples {
			r.Samples = append(r.Samples, &nbsv1.Sample{})
		}
		for range hists {
			r.Histograms = append(r.Histograms, &nbsv1.Histogram{BucketIndex: make([]uint32, buckets)})
		}
		return r
	}
	healthy, troubled := report(12, 0, 0), report(300, 50, 40)
	if a, b := arrayClass(healthy), arrayClass(troubled); a == b {
		t.Fatalf("a healthy and a troubled report share class %d", a)
	}
	var p reportArrayPool
	for range 10 {
		big := p.get(arrayClass(troubled))
		big.samples, big.indexes, big.counts = make([]store.Sample, 0, 512), make([]int32, 0, 2048), make([]int64, 0, 2048)
		p.put(big)
		small := p.get(arrayClass(healthy))
		if cap(small.samples) > 16 || cap(small.indexes) > 0 {
			t.Fatalf("a healthy report got arrays of %d samples and %d buckets", cap(small.samples), cap(small.indexes))
		}
		p.put(small)
	}
}
