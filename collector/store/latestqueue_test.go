package store

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestQueueLatestAsMaps: queueLatest, which sorts a batch's samples node by
// node in one kept slice, queues for node_latest exactly the arguments (and
// the JSON) that merging each node's reports into a map, newest last, did
// (queueLatestMaps, the way it was written before), for random batches: a
// node's several reports in and out of time order, equal times, clocks
// ahead of the collector's, snapshots, deep and roots-only nodes, reports
// already stored, a metric twice in a report. One scratch serves every
// batch, as a writer's does.
func TestQueueLatestAsMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 6))
	seed := maphash.MakeSeed()
	paths := []string{"a", "b", "cc", "drops", "ping", "a/x", "a/yy", "b/z", "cc/q/r", "tcp_reset/sent/no_socket"}
	base := time.UnixMilli(1795953636310)
	sc := new(latestScratch)
	var buf []byte
	for round := range 400 {
		nodes := 1 + rng.IntN(6)
		deepNodes := rng.IntN(3) // nodes 1..deepNodes may send deep reports
		var reports []Report
		inserted := map[ReportKey]bool{}
		for i := range 1 + rng.IntN(24) {
			node := int32(1 + rng.IntN(nodes))
			r := Report{NodeID: node, InstanceID: 7, Seq: uint64(i + 1), Time: base.Add(time.Duration(rng.IntN(4)) * 10 * time.Second),
				IntervalMS: uint32(5000 + 5000*rng.IntN(2)), Snapshot: rng.IntN(8) == 0}
			if rng.IntN(6) == 0 { // a clock ahead: ordered by when it was received
				r.Received = r.Time.Add(-time.Duration(rng.IntN(30)) * time.Second)
			}
			for _, p := range paths {
				if strings.Contains(p, "/") && int(node) > deepNodes || rng.IntN(3) == 0 {
					continue
				}
				s := Sample{Path: p, Value: float64(rng.IntN(1000)) / 8, State: State(rng.IntN(4))}
				if rng.IntN(10) == 0 {
					s.Value, s.NoValue = 0, true
				}
				r.Samples = append(r.Samples, s)
				if rng.IntN(40) == 0 { // twice: the later one counts
					s.Value++
					r.Samples = append(r.Samples, s)
				}
			}
			reports = append(reports, r)
			inserted[r.Key()] = rng.IntN(5) > 0
		}
		want := &pgx.Batch{}
		wantJSON, wantErr := queueLatestMaps(want, seed, []byte("before"), reports, inserted)
		got := &pgx.Batch{}
		var err error
		buf, err = queueLatest(got, seed, append(buf[:0], "before"...), reports, inserted, sc)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("round %d: error %v, the maps' %v", round, err, wantErr)
		}
		if string(buf) != string(wantJSON) {
			t.Fatalf("round %d: JSON\n%s\nthe maps'\n%s", round, buf, wantJSON)
		}
		if len(got.QueuedQueries) != len(want.QueuedQueries) {
			t.Fatalf("round %d: %d statements queued, the maps %d", round, len(got.QueuedQueries), len(want.QueuedQueries))
		}
		for q := range got.QueuedQueries {
			g, w := got.QueuedQueries[q].Arguments, want.QueuedQueries[q].Arguments
			for a := range w {
				if !reflect.DeepEqual(g[a], w[a]) {
					t.Fatalf("round %d: argument $%d is %#v, the maps' %#v", round, a+1, deref(g[a]), deref(w[a]))
				}
			}
		}
		sc.reset()
	}
	// A value JSON cannot carry is refused, roots-only or deep.
	for _, p := range []string{"a", "a/x"} {
		r := Report{NodeID: 1, Seq: 1, Time: base, IntervalMS: 10000, Samples: []Sample{{Path: p, Value: math.Inf(1)}}}
		if _, err := queueLatest(&pgx.Batch{}, seed, nil, []Report{r}, map[ReportKey]bool{r.Key(): true}, sc); err == nil {
			t.Fatalf("%s: an infinite value queued without an error", p)
		}
		sc.reset()
	}
}

// deref shows the strings and times behind an argument's pointers.
func deref(v any) any {
	switch v := v.(type) {
	case []*string:
		out := make([]string, len(v))
		for i, s := range v {
			out[i] = "<nil>"
			if s != nil {
				out[i] = strconv.Quote(*s)
			}
		}
		return out
	case []*time.Time:
		out := make([]string, len(v))
		for i, t := range v {
			out[i] = "<nil>"
			if t != nil {
				out[i] = t.String()
			}
		}
		return out
	}
	return v
}

// queueLatestMaps is queueLatest as it was written before: each node's
// values merged into a map, report after report in time order, its keys
// then sorted, and a string a node for its keys or states.
func queueLatestMaps(batch *pgx.Batch, seed maphash.Seed, all []byte, reports []Report, inserted map[ReportKey]bool) ([]byte, error) {
	type acc struct {
		ts         time.Time
		intervalMS uint32
		snapshot   *time.Time
		metrics    map[string]LatestValue
		deep       bool
	}
	byNode := map[int32]*acc{}
	var sorted []Report
	for _, r := range reports {
		if inserted[r.Key()] {
			sorted = append(sorted, r)
		}
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].OrderTime().Before(sorted[j].OrderTime()) })
	for _, r := range sorted {
		a := byNode[r.NodeID]
		if a == nil {
			a = &acc{metrics: map[string]LatestValue{}}
			byNode[r.NodeID] = a
		}
		a.ts, a.intervalMS = r.OrderTime(), r.IntervalMS
		if r.Snapshot {
			t := r.OrderTime()
			a.snapshot = &t
		}
		for _, smp := range r.Samples {
			a.deep = a.deep || strings.Contains(smp.Path, "/")
			a.metrics[smp.Path] = LatestValue{Value: smp.Value, State: smp.State, TimeMS: r.OrderTime().UnixMilli(), IntervalMS: r.IntervalMS, NoValue: smp.NoValue}
		}
	}
	nodes := make([]int32, 0, len(byNode))
	for node := range byNode {
		nodes = append(nodes, node)
	}
	if len(nodes) == 0 {
		return all, nil
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	ts := make([]time.Time, len(nodes))
	intervals := make([]int32, len(nodes))
	snapshots := make([]*time.Time, len(nodes))
	states := make([]*string, len(nodes))
	keySets := make([]int64, len(nodes))
	var h maphash.Hash
	h.SetSeed(seed)
	ends := make([]int, len(nodes))
	var (
		paths   = make([]*string, len(nodes))
		n       int32
		vals    []float64
		vstates []int16
		times   []int64
		ivals   []int32
		novalue []bool
		anyNone bool
		lo, hi  = make([]int32, len(nodes)), make([]int32, len(nodes))
		tlo     = make([]int32, len(nodes))
		thi     = make([]int32, len(nodes))
	)
	for i, node := range nodes {
		a := byNode[node]
		var keys []string
		for k := range a.metrics {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			if len(a) != len(b) {
				return len(a) - len(b)
			}
			return strings.Compare(a, b)
		})
		h.Reset()
		var nb [4]byte
		for _, k := range keys {
			binary.LittleEndian.PutUint32(nb[:], uint32(len(k)))
			h.Write(nb[:])
			h.WriteString(k)
		}
		keySets[i] = int64(h.Sum64())
		ts[i], intervals[i], snapshots[i] = a.ts, int32(a.intervalMS), a.snapshot
		lo[i], tlo[i] = n, int32(len(times))
		if !a.deep && a.snapshot == nil {
			byName := slices.Clone(keys)
			sort.Strings(byName)
			var b strings.Builder
			for j, k := range byName {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(k + "=" + strconv.Itoa(int(a.metrics[k].State)))
			}
			rs := b.String()
			states[i] = &rs
			var ent []latestEntry
			for _, k := range keys {
				ent = append(ent, latestEntry{path: k, v: a.metrics[k]})
			}
			var err error
			if all, err = appendLatestJSON(all, ent); err != nil {
				return all, err
			}
		} else {
			for _, k := range keys {
				v := a.metrics[k]
				if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
					return all, strconv.ErrRange
				}
				vals, vstates = append(vals, v.Value), append(vstates, int16(v.State))
				times, ivals, novalue = append(times, v.TimeMS), append(ivals, int32(v.IntervalMS)), append(novalue, v.NoValue)
				anyNone = anyNone || v.NoValue
			}
			if t := times[tlo[i]:]; len(t) > 1 && !slices.ContainsFunc(t, func(x int64) bool { return x != t[0] }) &&
				!slices.ContainsFunc(ivals[tlo[i]:], func(x int32) bool { return x != ivals[tlo[i]] }) {
				times, ivals = times[:tlo[i]+1], ivals[:tlo[i]+1]
			}
			p := strings.Join(keys, ",")
			paths[i], n = &p, n+int32(len(keys))
		}
		hi[i], thi[i], ends[i] = n, int32(len(times)), len(all)
	}
	metrics := make([][]byte, len(nodes))
	start := 0
	for i, end := range ends {
		if states[i] != nil {
			metrics[i] = all[start:end:end]
		}
		start = end
	}
	if !anyNone {
		novalue = nil
	}
	batch.Queue(mergeLatest, nodes, ts, intervals, snapshots, metrics, states, keySets, paths, vals, vstates, times, ivals, novalue, lo, hi, tlo, thi)
	return all, nil
}

// BenchmarkQueueLatest: a batch of 500 full trees (300 metrics each, in
// the agent's tree order) from 500 nodes, and of 500 roots-only reports,
// queued by queueLatest and by the maps it replaced.
//
//	go test -run '^$' -bench QueueLatest -benchmem ./collector/store
func BenchmarkQueueLatest(b *testing.B) {
	var tree []string
	for r := range 12 {
		root := fmt.Sprintf("root_%d", r)
		tree = append(tree, root)
		for c := range 24 {
			tree = append(tree, fmt.Sprintf("%s/child_%d", root, c), fmt.Sprintf("%s/child_%d/reason_%d", root, c, c%5))
		}
	}
	tree = tree[:300]
	base := time.UnixMilli(1795953636310)
	batch := func(paths []string) ([]Report, map[ReportKey]bool) {
		var reports []Report
		inserted := map[ReportKey]bool{}
		for n := range 500 {
			r := Report{NodeID: int32(n + 1), InstanceID: 1, Seq: 1, Time: base, IntervalMS: 10000}
			for i, p := range paths {
				r.Samples = append(r.Samples, Sample{Path: p, Value: float64(i), State: StateOK})
			}
			reports = append(reports, r)
			inserted[r.Key()] = true
		}
		return reports, inserted
	}
	seed := maphash.MakeSeed()
	for _, c := range []struct {
		name  string
		paths []string
	}{{"full trees", tree}, {"roots", tree[:12:12]}} {
		reports, inserted := batch(c.paths)
		b.Run(c.name+"/sorted", func(b *testing.B) {
			sc := new(latestScratch)
			var buf []byte
			for range b.N {
				var err error
				if buf, err = queueLatest(&pgx.Batch{}, seed, buf[:0], reports, inserted, sc); err != nil {
					b.Fatal(err)
				}
				sc.reset()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reports)*len(c.paths)), "ns/sample")
		})
		b.Run(c.name+"/maps", func(b *testing.B) {
			for range b.N {
				if _, err := queueLatestMaps(&pgx.Batch{}, seed, nil, reports, inserted); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reports)*len(c.paths)), "ns/sample")
		})
	}
}
