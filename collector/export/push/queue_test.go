package push

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/export"
)

// snapshotOf is a snapshot of one counter family with n series, at now.
func snapshotOf(now time.Time, n int, value float64) export.Snapshot {
	mf := &dto.MetricFamily{Name: proto.String("nbs_test_total"), Help: proto.String("test"), Type: dto.MetricType_COUNTER.Enum()}
	for i := range n {
		mf.Metric = append(mf.Metric, &dto.Metric{
			Label:   []*dto.LabelPair{{Name: proto.String("node"), Value: proto.String(fmt.Sprintf("n%03d", i))}},
			Counter: &dto.Counter{Value: proto.Float64(value + float64(i))}})
	}
	return export.Snapshot{Now: now, Families: []*dto.MetricFamily{mf}}
}

type drops map[string]int

func (d drops) count(reason string, samples int) { d[reason] += samples }

func TestQueueKeepsOrderAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	d := drops{}
	q, err := openQueue(dir, 1<<20, d.count)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	for i := range 3 {
		if err := q.append(snapshotOf(t0.Add(time.Duration(i)*15*time.Second), 4, float64(i))); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := q.head()
	if err := q.remove(e); err != nil {
		t.Fatal(err)
	}
	// A write the process never finished is no record.
	if err := os.WriteFile(filepath.Join(dir, tmpPrefix+"00000000000000000099"), []byte("NBQ1partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	q2, err := openQueue(dir, 1<<20, d.count)
	if err != nil {
		t.Fatal(err)
	}
	_, records, oldest := q2.stats()
	if records != 2 || !oldest.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("after reopen: %d records, oldest %s; want 2 from %s", records, oldest, t0.Add(15*time.Second))
	}
	for i := 1; i <= 2; i++ {
		e, ok := q2.head()
		if !ok {
			t.Fatal("queue empty early")
		}
		snap, err := q2.read(e)
		if err != nil {
			t.Fatal(err)
		}
		want := snapshotOf(t0.Add(time.Duration(i)*15*time.Second), 4, float64(i))
		if !snap.Now.Equal(want.Now) || !proto.Equal(snap.Families[0], want.Families[0]) || e.samples != 4 {
			t.Fatalf("record %d: got %s %v (%d samples), want %s %v", i, snap.Now, snap.Families, e.samples, want.Now, want.Families)
		}
		if err := q2.remove(e); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := q2.head(); ok {
		t.Fatal("queue not empty")
	}
	// A new record follows the old ones' sequence, never reusing one.
	if err := q2.append(snapshotOf(t0.Add(time.Minute), 1, 0)); err != nil {
		t.Fatal(err)
	}
	if e, _ := q2.head(); e.seq != 3 {
		t.Fatalf("next sequence %d, want 3", e.seq)
	}
	if _, err := os.Stat(filepath.Join(dir, tmpPrefix+"00000000000000000099")); !os.IsNotExist(err) {
		t.Fatalf("unfinished write left behind: %v", err)
	}
	if len(d) != 0 {
		t.Fatalf("dropped %v, want nothing", d)
	}
}

func TestQueueDropsTornRecord(t *testing.T) {
	tests := []struct {
		name string
		tear func(b []byte) []byte
	}{
		{"cut short", func(b []byte) []byte { return b[:len(b)-7] }},
		{"header only", func(b []byte) []byte { return b[:headerSize-3] }},
		{"flipped byte", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }},
		{"empty", func([]byte) []byte { return nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := drops{}
			q, err := openQueue(dir, 1<<20, d.count)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now().UTC().Truncate(time.Microsecond)
			for i := range 3 {
				if err := q.append(snapshotOf(t0.Add(time.Duration(i)*time.Second), 5, 1)); err != nil {
					t.Fatal(err)
				}
			}
			last := q.path(2)
			b, err := os.ReadFile(last)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(last, tc.tear(b), 0o600); err != nil {
				t.Fatal(err)
			}
			q2, err := openQueue(dir, 1<<20, d.count)
			if err != nil {
				t.Fatal(err)
			}
			if _, records, _ := q2.stats(); records != 2 {
				t.Fatalf("%d records after a torn last one, want the 2 whole ones", records)
			}
			if _, err := os.Stat(last); !os.IsNotExist(err) {
				t.Fatalf("torn record still on disk: %v", err)
			}
			if len(d) != 1 {
				t.Fatalf("dropped %v, want one corrupt record counted", d)
			}
			if _, ok := d["corrupt"]; !ok {
				t.Fatalf("dropped %v, want reason corrupt", d)
			}
			if err := q2.append(snapshotOf(t0.Add(time.Minute), 1, 1)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestQueueFullDropsOldest(t *testing.T) {
	dir := t.TempDir()
	d := drops{}
	b, _, err := encodeRecord(snapshotOf(time.Now(), 50, 1))
	if err != nil {
		t.Fatal(err)
	}
	// Room for three records of this size.
	q, err := openQueue(dir, int64(3*len(b)+len(b)/2), d.count)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	for i := range 5 {
		if err := q.append(snapshotOf(t0.Add(time.Duration(i)*time.Second), 50, 1)); err != nil {
			t.Fatal(err)
		}
	}
	bytes, records, oldest := q.stats()
	if records != 3 || !oldest.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("%d records from %s, want the newest 3 from %s", records, oldest, t0.Add(2*time.Second))
	}
	if bytes > q.maxBytes {
		t.Fatalf("%d bytes over the bound %d", bytes, q.maxBytes)
	}
	if d["full"] != 100 {
		t.Fatalf("dropped %v, want 100 samples (2 snapshots of 50) for full", d)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"+recordSuffix))
	if len(files) != 3 {
		t.Fatalf("%d files on disk, want 3", len(files))
	}
	// A snapshot larger than the whole bound is refused, counted, and
	// leaves the queue as it was.
	err = q.append(snapshotOf(t0.Add(time.Minute), 500, 1))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized snapshot: err %v", err)
	}
	if _, records, _ := q.stats(); records != 3 || d["full"] != 600 {
		t.Fatalf("after an oversized snapshot: %d records, dropped %v", records, d)
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{min: time.Second, max: time.Minute}
	tests := []struct {
		attempt  int
		low, top time.Duration
	}{
		{0, 500 * time.Millisecond, time.Second},
		{1, time.Second, 2 * time.Second},
		{3, 4 * time.Second, 8 * time.Second},
		{6, 30 * time.Second, time.Minute},
		{10, 30 * time.Second, time.Minute},
		{100, 30 * time.Second, time.Minute},
	}
	for _, tc := range tests {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := b.next(tc.attempt)
			if d < tc.low || d > tc.top {
				t.Fatalf("attempt %d: %s outside [%s, %s]", tc.attempt, d, tc.low, tc.top)
			}
			seen[d] = true
		}
		// Jitter: collectors retrying together spread out.
		if len(seen) < 100 {
			t.Fatalf("attempt %d: only %d distinct waits in 200", tc.attempt, len(seen))
		}
	}
}

func TestStaleMarkers(t *testing.T) {
	t0 := time.Now().UTC()
	gauge := func(names ...string) *dto.MetricFamily {
		mf := &dto.MetricFamily{Name: proto.String("nbs_test_seconds"), Type: dto.MetricType_GAUGE.Enum()}
		for _, n := range names {
			mf.Metric = append(mf.Metric, &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String("node"), Value: proto.String(n)}},
				Gauge: &dto.Gauge{Value: proto.Float64(1)}})
		}
		return mf
	}
	prev := snapshotOf(t0, 3, 1) // counters n000, n001, n002
	prev.Families = append(prev.Families, gauge("a", "b"))
	next := snapshotOf(t0.Add(15*time.Second), 2, 5) // n002 and the gauge family are gone
	got := withStaleMarkers(prev, next)

	stale := map[string]bool{}
	for _, mf := range got.Families {
		for _, m := range mf.Metric {
			v := m.GetCounter().GetValue()
			if mf.GetType() == dto.MetricType_GAUGE {
				v = m.GetGauge().GetValue()
			}
			if math.Float64bits(v) == math.Float64bits(staleNaN) {
				stale[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = true
			}
		}
	}
	want := map[string]bool{"nbs_test_total/n002": true, "nbs_test_seconds/a": true, "nbs_test_seconds/b": true}
	if !maps.Equal(stale, want) {
		t.Fatalf("staleness markers for %v, want %v", stale, want)
	}
	if len(next.Families[0].Metric) != 2 {
		t.Fatalf("the snapshot itself got %d series, want its own 2 (it is the next one's prev)", len(next.Families[0].Metric))
	}
	// The markers survive the queue: the record keeps the NaN's bits.
	b, _, err := encodeRecord(got)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if v := back.Families[0].Metric[2].GetCounter().GetValue(); math.Float64bits(v) != math.Float64bits(staleNaN) {
		t.Fatalf("marker read back as %x", math.Float64bits(v))
	}
	if got := withStaleMarkers(export.Snapshot{}, next); len(got.Families) != 1 || len(got.Families[0].Metric) != 2 {
		t.Fatalf("without a previous snapshot: %v", got.Families)
	}
}
