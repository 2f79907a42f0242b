package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/internal/loglinear"
)

// histMerge is mergeHistograms as the rows are read: a fold keeps one
// merged row per node, metric and bucket start, its buckets sparse, and
// never the rows it read. Read whole first (rollupRows, then
// mergeHistograms, then a [][]any of the merged rows), the minute fold of
// 4,000 nodes held about 60 MB at once each minute, more than the rest of
// the collector's live heap: every collection during a fold set the next
// heap goal from it, and the collector's memory per connected node
// followed (BENCHMARKS.md, "Collector memory per connected node").
type histMerge struct {
	at  map[histKey]int32
	out []mergedHist
	// Merged buckets live in chunks; a row that outgrows its place moves
	// to a new one (rarely: one metric's reports in a minute share most
	// of their buckets).
	idxChunk []int32
	cntChunk []int64
	// idxChunks and cntChunks are every chunk of histChunk made, kept
	// for the fold's next chunk of reports (reset): made anew for each,
	// the chunks, the map and the rows were a third of the collector's
	// allocations at 10,000 nodes once the write path's were gone. Not
	// kept from fold to fold, a minute apart: the collector's heap
	// would hold them in between. used counts those in use.
	idxChunks [][]int32
	cntChunks [][]int64
	used      int
	// One row's decoded buckets, and a merge's result, reused.
	rowIdx, tmpIdx []int32
	rowCnt, tmpCnt []int64
	dense          *loglinear.Dense // for a row whose buckets are not in order
	// The fold reads report by report, each report's metrics ascending,
	// and a node's reports of one minute carry the same metrics: the k-th
	// row of a report is usually the k-th row of the report before's
	// merged row. guess holds those rows by position (checked before it
	// is used), which spares the map lookup that was a fifth of the
	// fold's merge (TestExplainFoldHistograms).
	guess []int32
	pos   int
	last  histKey
}

type histKey struct {
	node, metric int32
	ts           int64
}

type mergedHist struct {
	histKey
	count uint64
	sum   float64
	idx   []int32
	cnt   []int64
}

// histChunk is how many buckets histMerge allocates at a time.
const histChunk = 1 << 14

// place returns room for n buckets with capacity for a few more.
func (m *histMerge) place(n int) ([]int32, []int64) {
	c := n + n/4 + 2
	switch {
	case cap(m.idxChunk)-len(m.idxChunk) >= c:
	case c > histChunk:
		m.idxChunk, m.cntChunk = make([]int32, 0, c), make([]int64, 0, c)
	default:
		if m.used == len(m.idxChunks) {
			m.idxChunks = append(m.idxChunks, make([]int32, 0, histChunk))
			m.cntChunks = append(m.cntChunks, make([]int64, 0, histChunk))
		}
		m.idxChunk, m.cntChunk = m.idxChunks[m.used][:0], m.cntChunks[m.used][:0]
		m.used++
	}
	at := len(m.idxChunk)
	m.idxChunk, m.cntChunk = m.idxChunk[:at+c], m.cntChunk[:at+c]
	// Full slice expressions: a row never grows into the next one's.
	return m.idxChunk[at : at+n : at+c], m.cntChunk[at : at+n : at+c]
}

// reset empties m for another chunk of the fold, keeping its room.
func (m *histMerge) reset() {
	clear(m.at)
	clear(m.out)
	m.out, m.guess, m.pos, m.last = m.out[:0], m.guess[:0], 0, histKey{}
	m.idxChunk, m.cntChunk, m.used = nil, nil, 0
}

// add merges one row, whose buckets may be reused once it returns.
func (m *histMerge) add(k histKey, count uint64, sum float64, idx []int32, cnt []int64) {
	if m.at == nil {
		m.at = map[histKey]int32{}
	}
	sorted := true
	for i, b := range idx {
		if i >= len(cnt) || b < 0 || b >= loglinear.Buckets || cnt[i] <= 0 || (i > 0 && b <= idx[i-1]) {
			sorted = false
			break
		}
	}
	if !sorted || len(idx) != len(cnt) {
		// As loglinear.Dense takes them (skipping what cannot be stored):
		// ingest never stores such buckets, so this is never the fast path.
		if m.dense == nil {
			m.dense = new(loglinear.Dense)
		}
		m.dense.Reset()
		m.dense.AddBuckets(idx, cnt, 0, 0)
		m.rowIdx, m.rowCnt = m.dense.AppendBuckets(m.rowIdx[:0], m.rowCnt[:0])
		idx, cnt = m.rowIdx, m.rowCnt
	}
	if k.node == m.last.node && k.ts == m.last.ts && k.metric > m.last.metric {
		m.pos++
	} else {
		m.pos = 0
	}
	m.last = k
	var g int32
	ok := m.pos < len(m.guess) && m.out[m.guess[m.pos]].histKey == k
	if ok {
		g = m.guess[m.pos]
	} else {
		g, ok = m.at[k]
		if !ok {
			g = int32(len(m.out))
		}
		for len(m.guess) <= m.pos {
			m.guess = append(m.guess, 0)
		}
		m.guess[m.pos] = g
	}
	if !ok {
		m.at[k] = g
		i, c := m.place(len(idx))
		copy(i, idx)
		copy(c, cnt)
		m.out = append(m.out, mergedHist{histKey: k, count: count, sum: sum, idx: i, cnt: c})
		return
	}
	h := &m.out[g]
	h.count += count
	h.sum += sum
	// Both in index order: one pass.
	ti, tc := m.tmpIdx[:0], m.tmpCnt[:0]
	a, b := 0, 0
	for a < len(h.idx) || b < len(idx) {
		switch {
		case b == len(idx) || (a < len(h.idx) && h.idx[a] < idx[b]):
			ti, tc = append(ti, h.idx[a]), append(tc, h.cnt[a])
			a++
		case a == len(h.idx) || idx[b] < h.idx[a]:
			ti, tc = append(ti, idx[b]), append(tc, cnt[b])
			b++
		default:
			ti, tc = append(ti, idx[b]), append(tc, h.cnt[a]+cnt[b])
			a++
			b++
		}
	}
	m.tmpIdx, m.tmpCnt = ti, tc
	if len(ti) <= cap(h.idx) {
		h.idx, h.cnt = h.idx[:len(ti)], h.cnt[:len(ti)]
	} else {
		h.idx, h.cnt = m.place(len(ti))
	}
	copy(h.idx, ti)
	copy(h.cnt, tc)
}

// read merges the rows of a query returning node_id, metric_id, bucket
// start, count, sum and the buckets column (bucketArena), streamed.
func (m *histMerge) read(ctx context.Context, db querier, query string, args ...any) error {
	return m.readRows(ctx, db, false, query, args...)
}

// readReports merges the rows of a query returning node_id, metric_id,
// a report's time, count, sum, bucket_index and bucket_count, as stored
// (histograms), each into its minute: the minute fold's read
// (foldPendingHistograms). The time is binned here and the arrays are
// read as PostgreSQL sends them: date_bin and array_send(…) ||
// array_send(…) in the query were a function call and a copy of the
// buckets more for every histogram.
func (m *histMerge) readReports(ctx context.Context, db querier, query string, args ...any) error {
	return m.readRows(ctx, db, true, query, args...)
}

func (m *histMerge) readRows(ctx context.Context, db querier, reports bool, query string, args ...any) error {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("read histogram rollups: %w", err)
	}
	defer rows.Close()
	var k histKey
	var ts time.Time
	var count int64
	var sum float64
	dest := []any{&k.node, &k.metric, &ts, &count, &sum, nil}
	if reports {
		dest = append(dest, nil)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("scan histogram rollup: %w", err)
		}
		var idxSrc, cntSrc []byte
		if reports {
			if idxSrc, err = binaryValue(rows, 5); err == nil {
				cntSrc, err = binaryValue(rows, 6)
			}
		} else {
			idxSrc, err = byteaOf(rows, 5)
		}
		if err != nil {
			return fmt.Errorf("scan histogram rollup buckets: %w", err)
		}
		idx, rest, err := appendArray(m.rowIdx[:0], idxSrc, 4, func(b []byte) int32 { return int32(binary.BigEndian.Uint32(b)) })
		if err != nil {
			return fmt.Errorf("scan histogram rollup buckets: bucket indexes: %w", err)
		}
		if reports {
			if len(rest) != 0 {
				return fmt.Errorf("scan histogram rollup buckets: %w: %d bytes after the bucket indexes", errBadArray, len(rest))
			}
			rest = cntSrc
		}
		cnt, rest, err := appendArray(m.rowCnt[:0], rest, 8, func(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) })
		if err != nil {
			return fmt.Errorf("scan histogram rollup buckets: bucket counts: %w", err)
		}
		if len(rest) != 0 || len(idx) != len(cnt) {
			return fmt.Errorf("scan histogram rollup buckets: %w: %d bucket indexes, %d counts and %d bytes more", errBadArray, len(idx), len(cnt), len(rest))
		}
		m.rowIdx, m.rowCnt = idx, cnt
		k.ts = ts.Unix()
		if reports {
			// date_bin('1 minute', ts, epoch): the minute's start.
			k.ts -= (k.ts%60 + 60) % 60
		}
		m.add(k, uint64(count), sum, idx, cnt)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read histogram rollups: %w", err)
	}
	return nil
}

// stage copies the merged rows, of resolution res, into
// stage_rollup_histograms (rollupStagingDDL), one row at a time.
func (m *histMerge) stage(ctx context.Context, tx pgx.Tx, res int32) error {
	src := &mergedSource{rows: m.out, res: res, at: -1, vals: make([]any, 8)}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"stage_rollup_histograms"},
		[]string{"res", "ts", "node_id", "metric_id", "count", "sum", "bucket_index", "bucket_count"}, src); err != nil {
		return fmt.Errorf("copy histogram rollups: %w", err)
	}
	return nil
}

// mergedSource is a pgx.CopyFromSource of merged rows. pgx encodes a
// row's values before it asks for the next, so one slice serves them all.
type mergedSource struct {
	rows []mergedHist
	res  int32
	at   int
	vals []any
}

func (s *mergedSource) Next() bool { s.at++; return s.at < len(s.rows) }
func (s *mergedSource) Err() error { return nil }
func (s *mergedSource) Values() ([]any, error) {
	h := &s.rows[s.at]
	s.vals[0], s.vals[1], s.vals[2], s.vals[3] = s.res, time.Unix(h.ts, 0).UTC(), h.node, h.metric
	s.vals[4], s.vals[5], s.vals[6], s.vals[7] = int64(h.count), h.sum, h.idx, h.cnt
	return s.vals, nil
}
