package store

import (
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// Histogram rollups read back with the buckets the write path folded and
// merged, the same as computing them from the raw reports, whether pgx
// receives the buckets column in binary or, over the simple protocol, as
// text.
func TestReadRollupsBuckets(t *testing.T) {
	ctx := context.Background()
	url := pgcluster.Database(t)
	st, err := Open(ctx, url, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	simple, err := Open(ctx, url+sep+"default_query_exec_mode=simple_protocol", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open store over the simple protocol: %v", err)
	}
	t.Cleanup(simple.Close)

	node, err := st.UpsertNode(ctx, Node{Name: "r", InstanceID: 1, IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{
		{Path: "ping/a", Title: "a", Unit: "ms", Kind: KindHistogram, Scale: 1e6, Quantile: 0.99},
		{Path: "latency/tx/sendmsg_to_qdisc", Title: "tx", Unit: "us", Kind: KindHistogram, Scale: 1e3, Quantile: 0.99},
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	var batch []Report
	for i := range 30 { // 5 minutes at 10 s
		rep := Report{NodeID: node, InstanceID: 1, Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * 10 * time.Second), IntervalMS: 10000}
		for k, path := range []string{"ping/a", "latency/tx/sendmsg_to_qdisc"} {
			h := loglinear.New()
			for v := range 20 + i {
				h.Record(uint64((v+1)*(i+1)*(k+1)*997) << (v % 20))
			}
			hist := Histogram{MetricID: ids[path], Path: path, Count: h.Count, Sum: h.Sum}
			for _, b := range h.Sorted() {
				hist.BucketIndex = append(hist.BucketIndex, int32(b))
				hist.BucketCount = append(hist.BucketCount, int64(h.Counts[b]))
			}
			rep.Histograms = append(rep.Histograms, hist)
		}
		batch = append(batch, rep)
	}
	// Two writes of the same minutes: the second merges into stored rows.
	for _, half := range [][]Report{batch[:15], batch[15:]} {
		if _, err := st.WriteReports(ctx, half); err != nil {
			t.Fatal(err)
		}
	}
	q := RollupQuery{NodeIDs: []int32{node}, Res: RollupMinute, From: t0, To: t0.Add(time.Hour)}
	read := func(s *Store, raw bool) []HistogramRow {
		t.Helper()
		q := q
		q.Raw = raw
		_, rows, err := s.ReadRollups(ctx, q)
		if err != nil {
			t.Fatalf("read rollups (raw %v): %v", raw, err)
		}
		slices.SortFunc(rows, func(a, b HistogramRow) int {
			if c := strings.Compare(a.Path, b.Path); c != 0 {
				return c
			}
			return a.TS.Compare(b.TS)
		})
		return rows
	}
	want := read(st, true)
	if len(want) != 10 {
		t.Fatalf("raw path: %d rows, want 2 metrics x 5 minutes", len(want))
	}
	for _, c := range []struct {
		name string
		st   *Store
	}{{"binary", st}, {"simple protocol", simple}} {
		got := read(c.st, false)
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", c.name, len(got), len(want))
		}
		for i, g := range got {
			w := want[i]
			if g.Path != w.Path || !g.TS.Equal(w.TS) || g.Count != w.Count || g.Sum != w.Sum ||
				!slices.Equal(g.Index, w.Index) || !slices.Equal(g.Counts, w.Counts) {
				t.Errorf("%s: row %d = %s %s count %d sum %v buckets %v %v, want %s %s %d %v %v %v", c.name, i,
					g.Path, g.TS, g.Count, g.Sum, g.Index, g.Counts, w.Path, w.TS, w.Count, w.Sum, w.Index, w.Counts)
			}
		}
	}
}

// Malformed binary arrays are errors, never a panic or a wrong count; what
// follows an array is left for the next.
func TestAppendArrayRejectsMalformed(t *testing.T) {
	be := func(vs ...uint32) []byte {
		var b []byte
		for _, v := range vs {
			b = append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		}
		return b
	}
	const int4 = 23
	cases := []struct {
		name string
		src  []byte
		want []int32 // nil: an error
		rest int
	}{
		{"empty array", be(0, 0, int4), []int32{}, 0},
		{"two elements", be(1, 0, int4, 2, 1, 4, 7, 4, 0xffffffff), []int32{7, -1}, 0},
		{"an array and more", be(1, 0, int4, 1, 1, 4, 7, 0, 0, int4), []int32{7}, 12},
		{"NULL array", nil, nil, 0},
		{"short header", be(1, 0), nil, 0},
		{"two dimensions", be(2, 0, int4, 1, 1, 1, 1, 4, 7), nil, 0},
		{"length past the data", be(1, 0, int4, 3, 1, 4, 7), nil, 0},
		{"negative length", be(1, 0, int4, 0xffffffff, 1), nil, 0},
		{"NULL element", be(1, 1, int4, 1, 1, 0xffffffff), nil, 0},
		{"8-byte element", be(1, 0, int4, 1, 1, 8, 0, 7), nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, rest, err := appendArray([]int32{}, c.src, 4, func(b []byte) int32 { return int32(binary.BigEndian.Uint32(b)) })
			if c.want == nil {
				if err == nil {
					t.Fatalf("decoded %v, want an error", got)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) || len(rest) != c.rest {
				t.Fatalf("got %v, %v and %d bytes more; want %v and %d", got, err, len(rest), c.want, c.rest)
			}
		})
	}
}
