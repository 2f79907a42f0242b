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

// bucketArena decodes the buckets column of histogram rollups (migration
// 010: array_send of bucket_index, then of bucket_count) into two shared
// slices. PostgreSQL sends the column as one value where it sent the arrays
// element by element, and pgx's generic array codec allocated and
// reflected per row (BENCHMARKS.md).
type bucketArena struct {
	idx []int32
	cnt []int64
}

// decode returns the current row's buckets from column col.
func (a *bucketArena) decode(rows pgx.Rows, col int) ([]int32, []int64, error) {
	src, err := byteaOf(rows, col)
	if err != nil {
		return nil, nil, err
	}
	// A row that does not fit starts a new chunk: rows already returned
	// keep theirs, and nothing is copied as the arena grows.
	a.idx = reserve(a.idx, len(src)/8)
	a.cnt = reserve(a.cnt, len(src)/12)
	i0, c0 := len(a.idx), len(a.cnt)
	if a.idx, src, err = appendArray(a.idx, src, 4, func(b []byte) int32 { return int32(binary.BigEndian.Uint32(b)) }); err != nil {
		return nil, nil, fmt.Errorf("bucket indexes: %w", err)
	}
	if a.cnt, src, err = appendArray(a.cnt, src, 8, func(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }); err != nil {
		return nil, nil, fmt.Errorf("bucket counts: %w", err)
	}
	if len(src) != 0 || len(a.idx)-i0 != len(a.cnt)-c0 {
		return nil, nil, fmt.Errorf("%w: %d bucket indexes, %d counts and %d bytes more", errBadArray, len(a.idx)-i0, len(a.cnt)-c0, len(src))
	}
	// Full slice expressions: a later append to the arena can never write
	// into a returned row's buckets.
	return a.idx[i0:len(a.idx):len(a.idx)], a.cnt[c0:len(a.cnt):len(a.cnt)], nil
}

// byteaOf is the current row's bytea column col, valid until the next
// row: the bytes as received, or decoded from hex under the simple
// protocol.
func byteaOf(rows pgx.Rows, col int) ([]byte, error) {
	src := rows.RawValues()[col]
	if fd := rows.FieldDescriptions()[col]; fd.Format != pgx.BinaryFormatCode {
		var b []byte
		if err := rows.Conn().TypeMap().Scan(fd.DataTypeOID, fd.Format, src, &b); err != nil {
			return nil, fmt.Errorf("bucket bytes: %w", err)
		}
		return b, nil
	}
	return src, nil
}

// binaryValue is column col of the current row as PostgreSQL sent it,
// which must be in binary (pgx asks for arrays of integers in binary).
func binaryValue(rows pgx.Rows, col int) ([]byte, error) {
	if fd := rows.FieldDescriptions()[col]; fd.Format != pgx.BinaryFormatCode {
		return nil, fmt.Errorf("column %s: format %d, want binary", fd.Name, fd.Format)
	}
	return rows.RawValues()[col], nil
}

var errBadArray = errors.New("malformed binary array")

// appendArray appends the elements of a one-dimensional binary-format
// PostgreSQL array of fixed-size elements at the start of src (array_send:
// number of dimensions, null flag, element type, length and lower bound per
// dimension, then length-prefixed elements) and returns the bytes after it.
// A NULL element is an error: the write path builds no such array.
func appendArray[T any](dst []T, src []byte, size int, elem func([]byte) T) ([]T, []byte, error) {
	if len(src) < 12 {
		return dst, nil, fmt.Errorf("%w: %d-byte header", errBadArray, len(src))
	}
	ndim := binary.BigEndian.Uint32(src)
	if ndim == 0 {
		return dst, src[12:], nil
	}
	if ndim != 1 || len(src) < 20 {
		return dst, nil, fmt.Errorf("%w: %d dimensions", errBadArray, ndim)
	}
	n := int(binary.BigEndian.Uint32(src[12:]))
	body := src[20:]
	if n < 0 || len(body)/(4+size) < n {
		return dst, nil, fmt.Errorf("%w: %d elements in %d bytes", errBadArray, n, len(body))
	}
	dst = slices.Grow(dst, n)
	for range n {
		if l := int32(binary.BigEndian.Uint32(body)); l != int32(size) {
			return dst, nil, fmt.Errorf("%w: NULL or %d-byte element", errBadArray, l)
		}
		dst = append(dst, elem(body[4:4+size]))
		body = body[4+size:]
	}
	return dst, body, nil
}
