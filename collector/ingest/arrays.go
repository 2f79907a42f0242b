package ingest

import (
	"math/bits"
	"sync"

	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// reportArrays are the arrays checkReport fills with a report's samples,
// histograms and buckets, kept from report to report: the writer gives
// them back once the report is stored and its agent told (or the server,
// once it refused the report). Made a report, they were a seventh of the
// collector's allocations at 10,000 nodes. Nothing that outlives the
// writer's batch keeps them: the alert hand-over copies the samples it
// holds.
type reportArrays struct {
	samples []store.Sample
	hists   []store.Histogram
	indexes []int32
	counts  []int64
	class   int // its pool (arrayClass)
}

// hold records what of the arrays r uses (checkReport may have grown
// them), so that release empties exactly that.
func (a *reportArrays) hold(r *store.Report) {
	a.samples, a.hists = r.Samples, r.Histograms
}

// reportArrayPool holds reportArrays for checkReport, apart by the size of
// the reports they were got for (arrayClass): in one pool, a healthy
// node's report took and kept a troubled node's arrays of thousands of
// buckets, and at 10,000 nodes the pool held 37 MB.
type reportArrayPool struct{ pools [arrayClasses]sync.Pool }

const arrayClasses = 16

// arrayClass is the pool for r's arrays: the bit length of its samples and
// histograms, and a quarter of its buckets (a bucket is a quarter of a
// sample's bytes), so a class's arrays are within twice of what its
// reports need.
func arrayClass(r *nbsv1.Report) int {
	n := len(r.GetSamples()) + len(r.GetHistograms())
	for _, h := range r.GetHistograms() {
		n += len(h.GetBucketIndex()) / 4
	}
	return min(bits.Len(uint(n)), arrayClasses-1)
}

func (p *reportArrayPool) get(class int) *reportArrays {
	if a, ok := p.pools[class].Get().(*reportArrays); ok {
		return a
	}
	return &reportArrays{class: class}
}

// put empties a's arrays (nothing of the report stays reachable from
// them) and keeps them, unless a huge report grew them. nil is nothing.
func (p *reportArrayPool) put(a *reportArrays) {
	if a == nil {
		return
	}
	if cap(a.samples) > maxKeptSamples || cap(a.hists) > maxKeptSamples || cap(a.indexes) > maxKeptSamples*64 {
		return
	}
	clear(a.samples)
	clear(a.hists)
	a.samples, a.hists, a.indexes, a.counts = a.samples[:0], a.hists[:0], a.indexes[:0], a.counts[:0]
	p.pools[a.class].Put(a)
}

// room is s emptied with room for n, grown when it has not: to a power of
// two, so that arrays kept from reports of many sizes (a troubled node's
// histograms) fit the next ones more often than not.
func room[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, 1<<bits.Len(uint(n-1)))
	}
	return s[:0]
}
