package store

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgtype"
)

// copySource is a table's rows as copyEncoded COPYs them: each row's
// fields appended for the columns of the types oids.
type copySource interface {
	Len() int
	appendRow(m *pgtype.Map, buf []byte, i int, oids []uint32) ([]byte, error)
}

// anyRows are rows of values, each encoded as pgx would (appendField).
type anyRows [][]any

func (rs anyRows) Len() int { return len(rs) }

func (rs anyRows) appendRow(m *pgtype.Map, buf []byte, i int, oids []uint32) ([]byte, error) {
	return appendAnyRow(m, buf, rs[i], oids)
}

func appendAnyRow(m *pgtype.Map, buf []byte, row []any, oids []uint32) ([]byte, error) {
	if len(row) != len(oids) {
		return buf, fmt.Errorf("a row of %d values for %d columns", len(row), len(oids))
	}
	for i, v := range row {
		var err error
		if buf, err = appendField(m, buf, oids[i], v); err != nil {
			return buf, fmt.Errorf("column %d: %w", i+1, err)
		}
	}
	return buf, nil
}

// The batch's reports, histograms and rollup_pending rows are encoded
// straight from its reports, in the bytes appendField writes for the
// values CopyRows gives (TestCopySourcesAsCopyRows): CopyRows' rows boxed
// every value and copied every report's samples into three arrays, an
// eighth of the collector's allocations at 10,000 nodes once the
// statements' were gone (BENCHMARKS.md, "Collector memory per connected
// node"). Columns of other types than the migrations make (none today)
// take CopyRows' values.
var (
	reportOIDs = []uint32{pgtype.Int4OID, pgtype.Int8OID, pgtype.Int8OID, pgtype.TimestamptzOID, pgtype.Int4OID, pgtype.BoolOID,
		pgtype.Int4ArrayOID, pgtype.Float8ArrayOID, pgtype.Int2ArrayOID}
	histOIDs = []uint32{pgtype.Int4OID, pgtype.Int8OID, pgtype.Int8OID, pgtype.TimestamptzOID, pgtype.Int4OID, pgtype.Int8OID,
		pgtype.Float8OID, pgtype.Int4ArrayOID, pgtype.Int8ArrayOID}
	pendingOIDs = []uint32{pgtype.Int4OID, pgtype.Int8OID, pgtype.Int8OID, pgtype.TimestamptzOID, pgtype.Int4ArrayOID}
)

// reportRows are the batch's reports rows.
type reportRows []Report

func (rs reportRows) Len() int { return len(rs) }

func (rs reportRows) appendRow(m *pgtype.Map, buf []byte, i int, oids []uint32) ([]byte, error) {
	r := &rs[i]
	if !slices.Equal(oids, reportOIDs) {
		row, _, _, err := CopyRows(*r)
		if err != nil {
			return buf, err
		}
		return appendAnyRow(m, buf, row, oids)
	}
	buf = appendKeyFields(buf, r)
	buf = appendInt4Field(buf, int32(r.IntervalMS))
	buf = appendBool(appendLen(buf, 1), r.Snapshot)
	samples := r.Samples
	if samples == nil {
		samples = []Sample{} // an empty array, as CopyRows' is, not NULL
	}
	buf = appendArrayField(buf, pgtype.Int4OID, samples, func(b []byte, s Sample) ([]byte, bool) { return int4Elem(b, s.MetricID) })
	buf = appendArrayField(buf, pgtype.Float8OID, samples, func(b []byte, s Sample) ([]byte, bool) { return float8Elem(b, storedValue(s)) })
	return appendArrayField(buf, pgtype.Int2OID, samples, func(b []byte, s Sample) ([]byte, bool) { return int2Elem(b, int16(s.State)) }), nil
}

// histRows are the batch's histograms rows: at[i] is the report and
// histogram of row i.
type histRows struct {
	reports []Report
	at      [][2]int32
}

func newHistRows(reports []Report) histRows {
	n := 0
	for _, r := range reports {
		n += len(r.Histograms)
	}
	h := histRows{reports: reports}
	if n > 0 {
		h.at = make([][2]int32, 0, n)
		for i, r := range reports {
			for j := range r.Histograms {
				h.at = append(h.at, [2]int32{int32(i), int32(j)})
			}
		}
	}
	return h
}

func (hs histRows) Len() int { return len(hs.at) }

func (hs histRows) appendRow(m *pgtype.Map, buf []byte, i int, oids []uint32) ([]byte, error) {
	r := &hs.reports[hs.at[i][0]]
	h := &r.Histograms[hs.at[i][1]]
	if !slices.Equal(oids, histOIDs) {
		_, rows, _, err := CopyRows(Report{NodeID: r.NodeID, InstanceID: r.InstanceID, Seq: r.Seq, Time: r.Time, Histograms: []Histogram{*h}})
		if err != nil {
			return buf, err
		}
		return appendAnyRow(m, buf, rows[0], oids)
	}
	buf = appendKeyFields(buf, r)
	buf = appendInt4Field(buf, h.MetricID)
	buf, _ = int8Elem(buf, int64(h.Count))
	buf, _ = float8Elem(buf, h.Sum)
	// A nil bucket array is NULL, as pgx writes CopyRows' nil slice.
	buf = appendArrayField(buf, pgtype.Int4OID, h.BucketIndex, int4Elem)
	return appendArrayField(buf, pgtype.Int8OID, h.BucketCount, int8Elem), nil
}

// pendingRows are the batch's rollup_pending rows; ids is room for a
// row's histogram ids.
type pendingRows struct {
	reports []Report
	ids     *[]int32
}

func newPendingRows(reports []Report) pendingRows {
	return pendingRows{reports: reports, ids: new([]int32)}
}

func (ps pendingRows) Len() int { return len(ps.reports) }

// histIDs are r's histograms' metric ids, sorted, each once; nil without
// histograms (NULL, as moveStaged writes it).
func histIDs(r *Report, into []int32) []int32 {
	if len(r.Histograms) == 0 {
		return nil
	}
	ids := into[:0]
	for _, h := range r.Histograms {
		if !slices.Contains(ids, h.MetricID) {
			ids = append(ids, h.MetricID)
		}
	}
	slices.Sort(ids)
	return ids
}

func (ps pendingRows) appendRow(m *pgtype.Map, buf []byte, i int, oids []uint32) ([]byte, error) {
	r := &ps.reports[i]
	ids := histIDs(r, *ps.ids)
	if ids != nil {
		*ps.ids = ids
	}
	if !slices.Equal(oids, pendingOIDs) {
		return appendAnyRow(m, buf, []any{r.NodeID, int64(r.InstanceID), int64(r.Seq), r.Time, slices.Clone(ids)}, oids)
	}
	buf = appendKeyFields(buf, r)
	return appendArrayField(buf, pgtype.Int4OID, ids, int4Elem), nil
}

// appendKeyFields appends a report's node_id, instance_id, seq and ts.
func appendKeyFields(buf []byte, r *Report) []byte {
	buf = appendInt4Field(buf, r.NodeID)
	buf, _ = int8Elem(buf, int64(r.InstanceID))
	buf, _ = int8Elem(buf, int64(r.Seq))
	return appendTimestamptz(buf, r.Time)
}

func appendInt4Field(buf []byte, v int32) []byte {
	buf, _ = int4Elem(buf, v)
	return buf
}

// appendArrayField appends v as an array field: its length and the array
// (appendElems), or -1 for NULL (v nil).
func appendArrayField[T any](buf []byte, elemOID uint32, v []T, elem func([]byte, T) ([]byte, bool)) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(buf, 0xffffffff)
	}
	at := len(buf)
	buf = appendElems(appendLen(buf, 0), elemOID, v, elem)
	binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
	return buf
}
