package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// arenaChunk is how many buckets a bucketArena allocates at a time.
const arenaChunk = 1 << 16

func reserve[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	return make([]T, 0, max(n, arenaChunk))
}

// bucketArena decodes the bucket_index (integer[]) and bucket_count
// (bigint[]) columns of histogram rows into two shared, growing slices.
// pgx's generic array codec allocated and reflected per row and was a
// third of a month-long report's time (BENCHMARKS.md); the binary array
// format is simple enough to read directly.
type bucketArena struct {
	idx []int32
	cnt []int64
}

// decode returns the current row's buckets from columns ic and cc, which
// must have as many elements as each other.
func (a *bucketArena) decode(rows pgx.Rows, ic, cc int) ([]int32, []int64, error) {
	raw := rows.RawValues()
	fds := rows.FieldDescriptions()
	if fds[ic].Format != pgx.BinaryFormatCode || fds[cc].Format != pgx.BinaryFormatCode {
		// The simple protocol sends text: let pgx parse it.
		var idx []int32
		var cnt []int64
		m := rows.Conn().TypeMap()
		if err := m.Scan(fds[ic].DataTypeOID, fds[ic].Format, raw[ic], &idx); err != nil {
			return nil, nil, fmt.Errorf("bucket indexes: %w", err)
		}
		if err := m.Scan(fds[cc].DataTypeOID, fds[cc].Format, raw[cc], &cnt); err != nil {
			return nil, nil, fmt.Errorf("bucket counts: %w", err)
		}
		if len(idx) != len(cnt) {
			return nil, nil, fmt.Errorf("%d bucket indexes and %d counts", len(idx), len(cnt))
		}
		return idx, cnt, nil
	}
	// A row that does not fit starts a new chunk: rows already returned
	// keep theirs, and nothing is copied as the arena grows.
	a.idx = reserve(a.idx, len(raw[ic])/8)
	a.cnt = reserve(a.cnt, len(raw[cc])/12)
	i0, c0 := len(a.idx), len(a.cnt)
	var err error
	if a.idx, err = appendArray(a.idx, raw[ic], 4, func(b []byte) int32 { return int32(binary.BigEndian.Uint32(b)) }); err != nil {
		return nil, nil, fmt.Errorf("bucket indexes: %w", err)
	}
	if a.cnt, err = appendArray(a.cnt, raw[cc], 8, func(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }); err != nil {
		return nil, nil, fmt.Errorf("bucket counts: %w", err)
	}
	if len(a.idx)-i0 != len(a.cnt)-c0 {
		return nil, nil, fmt.Errorf("%d bucket indexes and %d counts", len(a.idx)-i0, len(a.cnt)-c0)
	}
	// Full slice expressions: a later append to the arena can never write
	// into a returned row's buckets.
	return a.idx[i0:len(a.idx):len(a.idx)], a.cnt[c0:len(a.cnt):len(a.cnt)], nil
}

var errBadArray = errors.New("malformed binary array")

// appendArray appends the elements of a one-dimensional binary-format
// PostgreSQL array of fixed-size elements (PostgreSQL's array_send: number
// of dimensions, null flag, element type, length and lower bound per
// dimension, then length-prefixed elements). A NULL array or element is an
// error: the columns are NOT NULL and so are the arrays the write path
// builds.
func appendArray[T any](dst []T, src []byte, size int, elem func([]byte) T) ([]T, error) {
	if src == nil {
		return dst, fmt.Errorf("%w: NULL", errBadArray)
	}
	if len(src) < 12 {
		return dst, fmt.Errorf("%w: %d-byte header", errBadArray, len(src))
	}
	ndim := binary.BigEndian.Uint32(src)
	if ndim == 0 {
		return dst, nil
	}
	if ndim != 1 || len(src) < 20 {
		return dst, fmt.Errorf("%w: %d dimensions", errBadArray, ndim)
	}
	n := int(binary.BigEndian.Uint32(src[12:]))
	body := src[20:]
	if n < 0 || len(body) != n*(4+size) {
		return dst, fmt.Errorf("%w: %d elements in %d bytes", errBadArray, n, len(body))
	}
	dst = slices.Grow(dst, n)
	for range n {
		if int32(binary.BigEndian.Uint32(body)) != int32(size) {
			return dst, fmt.Errorf("%w: NULL or %d-byte element", errBadArray, int32(binary.BigEndian.Uint32(body)))
		}
		dst = append(dst, elem(body[4:4+size]))
		body = body[4+size:]
	}
	return dst, nil
}
