package store

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// rawRow decodes the columns of flow_edges' reads from the wire bytes
// (rows.RawValues): pgx's Scan allocated a string per text column of every
// row, and a map's first read decodes 100,000 to 500,000 rows of eight
// text columns each, most of them the same few thousand owners and
// addresses (bench/flowmap: Scan and the garbage it made were half the
// read). Strings are interned per read. A column in a format the fast path
// does not expect (the simple protocol sends every column as text) is left
// to pgx.
type rawRow struct {
	rows pgx.Rows
	fds  []pgconn.FieldDescription
	vals [][]byte
	strs map[string]interned
	// last is each column's string of the row before: rows come a node's
	// owner at a time, so most columns repeat it, and comparing bytes
	// costs less than hashing them (bench/flowmap: the interning lookups
	// were a fifth of a read's decoding).
	last []interned
	err  error
}

// interned is a string of a read, with its number: equal strings of one
// read have one number, which keys a row's edge in fewer bytes to hash.
type interned struct {
	s  string
	id uint32
}

func newRawRow(rows pgx.Rows) *rawRow {
	// Number 0 is the empty string, which most translated peers are.
	return &rawRow{rows: rows, strs: map[string]interned{"": {}}}
}

// next moves to the next row, as rows.Next.
func (r *rawRow) next() bool {
	if !r.rows.Next() {
		return false
	}
	r.vals = r.rows.RawValues()
	if r.fds == nil {
		r.fds = r.rows.FieldDescriptions()
	}
	return true
}

func (r *rawRow) fail(col int, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("column %d: %w", col, err)
	}
}

func (r *rawRow) null(col int) bool {
	if col >= len(r.vals) || r.vals[col] == nil {
		r.fail(col, fmt.Errorf("NULL or missing"))
		return true
	}
	return false
}

// scan leaves column col to pgx.
func (r *rawRow) scan(col int, dst any) {
	fd := r.fds[col]
	if err := r.rows.Conn().TypeMap().Scan(fd.DataTypeOID, fd.Format, r.vals[col], dst); err != nil {
		r.fail(col, err)
	}
}

// str is a text column, interned: text's binary and text formats are the
// same bytes.
func (r *rawRow) str(col int) string { return r.istr(col).s }

// istr is str with the string's number in this read.
func (r *rawRow) istr(col int) interned {
	if r.null(col) {
		return interned{}
	}
	b := r.vals[col]
	if len(b) == 0 {
		return interned{}
	}
	if col < len(r.last) && r.last[col].s == string(b) {
		return r.last[col]
	}
	in, ok := r.strs[string(b)]
	if !ok {
		in = interned{string(b), uint32(len(r.strs))}
		r.strs[in.s] = in
	}
	if col >= len(r.last) {
		r.last = append(r.last, make([]interned, col+1-len(r.last))...)
	}
	r.last[col] = in
	return in
}

// is says text column col is s, without making a string of it.
func (r *rawRow) is(col int, s string) bool {
	return col < len(r.vals) && r.vals[col] != nil && string(r.vals[col]) == s
}

// int is an int2, int4 or int8 column.
func (r *rawRow) int(col int) int64 {
	if r.null(col) {
		return 0
	}
	b := r.vals[col]
	if r.fds[col].Format == pgx.BinaryFormatCode {
		switch len(b) {
		case 2:
			return int64(int16(binary.BigEndian.Uint16(b)))
		case 4:
			return int64(int32(binary.BigEndian.Uint32(b)))
		case 8:
			return int64(binary.BigEndian.Uint64(b))
		}
	}
	var v int64
	r.scan(col, &v)
	return v
}

// pgEpochUnixMicros is 2000-01-01 UTC, PostgreSQL's epoch, in Unix µs.
const pgEpochUnixMicros = 946684800 * 1_000_000

// time is a timestamptz column, as pgx returns it (local time).
func (r *rawRow) time(col int) time.Time {
	if r.null(col) {
		return time.Time{}
	}
	b := r.vals[col]
	if r.fds[col].Format == pgx.BinaryFormatCode && len(b) == 8 {
		us := int64(binary.BigEndian.Uint64(b))
		// ±infinity are the extremes: pgx's codec reports them.
		if us != 1<<63-1 && us != -1<<63 {
			us += pgEpochUnixMicros
			return time.Unix(us/1_000_000, (us%1_000_000)*1000)
		}
	}
	var t time.Time
	r.scan(col, &t)
	return t
}

// json is a jsonb column's JSON text, valid until the next row.
func (r *rawRow) json(col int) []byte {
	if r.null(col) {
		return nil
	}
	b := r.vals[col]
	if r.fds[col].Format == pgx.BinaryFormatCode {
		// jsonb_send: a version byte (1), then the text.
		if len(b) == 0 || b[0] != 1 {
			r.fail(col, fmt.Errorf("jsonb of an unknown version"))
			return nil
		}
		return b[1:]
	}
	return b
}
