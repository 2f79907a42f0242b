package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// sendEncoded sends a batch's statements in one round trip on tx's
// connection, as tx.SendBatch(ctx, batch).Close() does, with the protocol
// messages (each statement's Bind and Execute, then Sync) built in buf,
// which it returns (kept for the next batch).
//
// pgx encodes a statement's arguments into a buffer it shrinks back to
// 256 bytes after every statement, boxing every element of an array into
// an interface (and, for a slice of pointers or of []byte, allocating one
// by reflection): the arrays of a batch's merge into node_latest were, with
// their copies, a third of all the collector's allocations at 10,000 nodes,
// and the collections they caused a fifth of its CPU (BENCHMARKS.md,
// "Collector memory per connected node"). Here the arrays the write path
// sends (appendParamArray) are written straight into the Bind messages;
// anything else is encoded by the connection's own type map, in place too.
// pgconn's own Batch copied the encoded arguments once more into Bind
// messages in a buffer grown from nothing each batch (18% of the
// collector's allocations at 10,000 nodes, after the rest): so the
// messages go to the connection from buf, and the answers are read with
// pgconn's ReceiveMessage.
//
// Each statement is prepared once a connection (by its SQL, as pgx's own
// statement cache would). The batch's queries must not read their results
// (QueuedQuery.Fn): nothing here reads them. The first statement that
// fails is the error (a *pgconn.PgError), as pgx's batch returns it.
func sendEncoded(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, buf []byte) ([]byte, error) {
	conn := tx.Conn()
	m := conn.TypeMap()
	buf = buf[:0]
	for _, q := range batch.QueuedQueries {
		if q.Fn != nil {
			return buf, fmt.Errorf("queued query reads its results: not supported here")
		}
		sd, err := conn.Prepare(ctx, q.SQL, q.SQL)
		if err != nil {
			return buf, fmt.Errorf("prepare: %w", err)
		}
		if len(sd.ParamOIDs) != len(q.Arguments) {
			return buf, fmt.Errorf("statement takes %d arguments, %d given", len(sd.ParamOIDs), len(q.Arguments))
		}
		if buf, err = appendBind(buf, m, sd, q.Arguments); err != nil {
			return buf, err
		}
		// Execute the unnamed portal, every row.
		buf = append(buf, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
	}
	buf = append(buf, 'S', 0, 0, 0, 4)
	return buf, roundTrip(ctx, conn.PgConn(), buf)
}

// appendBind appends a Bind message of args to sd's statement into the
// unnamed portal, as pgproto3.Bind encodes it: arrays the write path
// sends in binary (appendParamArray), anything else as the connection's
// type map encodes it, results in text (pgconn's default; none are read).
func appendBind(buf []byte, m *pgtype.Map, sd *pgconn.StatementDescription, args []any) ([]byte, error) {
	if len(args) > math.MaxUint16 {
		return buf, fmt.Errorf("%d arguments, at most %d allowed", len(args), math.MaxUint16)
	}
	start := len(buf)
	buf = append(buf, 'B', 0, 0, 0, 0, 0) // type, length (below), the unnamed portal
	buf = append(append(buf, sd.Name...), 0)
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(args)))
	formatsAt := len(buf)
	for range args {
		buf = append(buf, 0, 0) // each argument's format, once encoded
	}
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(args)))
	for j, arg := range args {
		oid, at := sd.ParamOIDs[j], len(buf)
		buf = append(buf, 0, 0, 0, 0) // its length
		out, ok, err := appendParamArray(buf, oid, arg)
		format := int16(pgtype.BinaryFormatCode)
		if !ok {
			format = m.FormatCodeForOID(oid)
			out, err = m.Encode(oid, format, arg, buf)
		}
		if err != nil {
			return buf[:start], fmt.Errorf("encode argument %d: %w", j+1, err)
		}
		if out == nil { // NULL: -1
			buf = binary.BigEndian.AppendUint32(buf[:at], math.MaxUint32)
		} else {
			buf = out
			binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
		}
		binary.BigEndian.PutUint16(buf[formatsAt+2*j:], uint16(format))
	}
	buf = binary.BigEndian.AppendUint16(buf, 0) // result formats: text
	if len(buf)-start-1 > math.MaxInt32 {
		return buf[:start], fmt.Errorf("a Bind message of %d bytes, at most %d allowed", len(buf)-start-1, math.MaxInt32)
	}
	binary.BigEndian.PutUint32(buf[start+1:], uint32(len(buf)-start-1))
	return buf, nil
}

// roundTrip writes msgs, which end with a Sync, to pc's connection and
// reads the answers up to ReadyForQuery; the first error the server sent
// is the result. The server answers each statement with a few bytes, so
// it never waits for this side to read while this side writes (pgconn's
// ExecBatch reads aside for batches whose answers may be large).
func roundTrip(ctx context.Context, pc *pgconn.PgConn, msgs []byte) error {
	if err := pc.SyncConn(ctx); err != nil {
		return err
	}
	nc := pc.Conn()
	// A write the context ends stops at once; the connection is then
	// broken mid-message and closed (closeBroken), which ends the
	// transaction.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetWriteDeadline(time.Unix(1, 0)) })
	_, err := nc.Write(msgs)
	if !stop() {
		_ = nc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		closeBroken(ctx, pc)
		if ctx.Err() != nil {
			return fmt.Errorf("send statements: %w", ctx.Err())
		}
		return fmt.Errorf("send statements: %w", err)
	}
	var first error
	for {
		msg, err := pc.ReceiveMessage(ctx)
		if err != nil {
			// Answers may be left unread: the connection is done for.
			closeBroken(ctx, pc)
			return fmt.Errorf("read the statements' results: %w", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			if first == nil {
				first = pgconn.ErrorResponseToPgError(msg)
			}
		case *pgproto3.ReadyForQuery:
			return first
		}
	}
}

// closeBroken closes a connection left mid-protocol (a message half
// written, answers unread), as pgconn does its own: the pool then drops
// it rather than lend it again.
func closeBroken(ctx context.Context, pc *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = pc.Close(ctx)
}

// pgEpochMicros is 2000-01-01 UTC, PostgreSQL's epoch, in microseconds
// since 1970.
const pgEpochMicros = 946684800 * 1000000

// appendParamArray appends arg as a PostgreSQL array of the type oid names in
// binary, as pgx would encode it, for the slices the write path sends
// (ok); a nil slice is NULL (nil, true). Any other pair is not its (false).
func appendParamArray(buf []byte, oid uint32, arg any) (out []byte, ok bool, err error) {
	switch v := arg.(type) {
	case []int32:
		if oid != pgtype.Int4ArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.Int4OID, v, int4Elem), true, nil
	case []int64:
		if oid != pgtype.Int8ArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.Int8OID, v, int8Elem), true, nil
	case []int16:
		if oid != pgtype.Int2ArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.Int2OID, v, int2Elem), true, nil
	case []float64:
		if oid != pgtype.Float8ArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.Float8OID, v, float8Elem), true, nil
	case []bool:
		if oid != pgtype.BoolArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.BoolOID, v, func(b []byte, x bool) ([]byte, bool) {
			return appendBool(appendLen(b, 1), x), true
		}), true, nil
	case []time.Time:
		if oid != pgtype.TimestamptzArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.TimestamptzOID, v, func(b []byte, x time.Time) ([]byte, bool) {
			return appendTimestamptz(b, x), true
		}), true, nil
	case []*time.Time:
		if oid != pgtype.TimestamptzArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.TimestamptzOID, v, func(b []byte, x *time.Time) ([]byte, bool) {
			if x == nil {
				return b, false
			}
			return appendTimestamptz(b, *x), true
		}), true, nil
	case []*string:
		if oid != pgtype.TextArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.TextOID, v, func(b []byte, x *string) ([]byte, bool) {
			if x == nil {
				return b, false
			}
			return append(appendLen(b, len(*x)), *x...), true
		}), true, nil
	case []string:
		if oid != pgtype.TextArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.TextOID, v, func(b []byte, x string) ([]byte, bool) {
			return append(appendLen(b, len(x)), x...), true
		}), true, nil
	case [][]byte:
		// jsonb's binary form is a version byte and the text.
		if oid != pgtype.JSONBArrayOID {
			return nil, false, nil
		}
		return appendElems(buf, pgtype.JSONBOID, v, func(b []byte, x []byte) ([]byte, bool) {
			if x == nil {
				return b, false
			}
			return appendJSONB(appendLen(b, 1+len(x)), x), true
		}), true, nil
	}
	return nil, false, nil
}

// appendElems appends a one-dimensional array of elem (PostgreSQL's
// array_send): a header, then each element as its length and bytes, or
// -1 for NULL (elem returns false and appends nothing); nil is NULL
// (returns nil), and an empty slice one dimension of length 0, as pgx
// sends them.
func appendElems[T any](buf []byte, elemOID uint32, v []T, elem func([]byte, T) ([]byte, bool)) []byte {
	if v == nil {
		return nil
	}
	if buf == nil {
		buf = []byte{} // not NULL
	}
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	nulls := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, elemOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for _, x := range v {
		var ok bool
		if buf, ok = elem(buf, x); !ok {
			buf = binary.BigEndian.AppendUint32(buf, math.MaxUint32) // -1: NULL
			binary.BigEndian.PutUint32(buf[nulls:], 1)
		}
	}
	return buf
}

// appendLen appends an element's length.
func appendLen(b []byte, n int) []byte { return binary.BigEndian.AppendUint32(b, uint32(n)) }

// The element encoders of appendElems, each a value's length and binary
// form (also a COPY field's: appendRow).
func int2Elem(b []byte, x int16) ([]byte, bool) {
	return binary.BigEndian.AppendUint16(appendLen(b, 2), uint16(x)), true
}
func int4Elem(b []byte, x int32) ([]byte, bool) {
	return binary.BigEndian.AppendUint32(appendLen(b, 4), uint32(x)), true
}
func int8Elem(b []byte, x int64) ([]byte, bool) {
	return binary.BigEndian.AppendUint64(appendLen(b, 8), uint64(x)), true
}
func float8Elem(b []byte, x float64) ([]byte, bool) {
	return binary.BigEndian.AppendUint64(appendLen(b, 8), math.Float64bits(x)), true
}

// appendTimestamptz appends t as a timestamptz element: its length and
// the value (appendTime).
func appendTimestamptz(b []byte, t time.Time) []byte { return appendTime(appendLen(b, 8), t) }

// appendTime appends t in timestamptz's binary form: microseconds since
// 2000-01-01 UTC.
func appendTime(b []byte, t time.Time) []byte {
	us := t.Unix()*1000000 + int64(t.Nanosecond())/1000 - pgEpochMicros
	return binary.BigEndian.AppendUint64(b, uint64(us))
}

// appendBool appends b in bool's binary form.
func appendBool(buf []byte, b bool) []byte {
	if b {
		return append(buf, 1)
	}
	return append(buf, 0)
}

// appendJSONB appends x in jsonb's binary form: a version byte and the text.
func appendJSONB(b []byte, x []byte) []byte { return append(append(b, 1), x...) }

// copyEncoded COPYs rows into table's columns, as pgx's CopyFrom would,
// with the rows encoded into buf (returned, kept for the next batch) and
// the columns' types from a statement prepared once a connection.
//
// pgx's CopyFrom encodes into a buffer grown anew from 1 KiB each call,
// boxing every array element on the way, and asks the server for the
// columns' types before each COPY (a round trip): at 10,000 nodes its
// buffers were a sixth of the collector's allocations once the
// statements' arguments were no longer (sendEncoded).
func copyEncoded(ctx context.Context, tx pgx.Tx, table string, cols []string, rows copySource, buf []byte) ([]byte, error) {
	conn := tx.Conn()
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	list, name := strings.Join(quoted, ", "), pgx.Identifier{table}.Sanitize()
	describe := "select " + list + " from " + name
	sd, err := conn.Prepare(ctx, describe, describe)
	if err != nil {
		return buf, fmt.Errorf("describe %s: %w", table, err)
	}
	m := conn.TypeMap()
	buf = append(buf[:0], "PGCOPY\n\377\r\n\000"...)
	buf = binary.BigEndian.AppendUint32(buf, 0) // flags
	buf = binary.BigEndian.AppendUint32(buf, 0) // no header extension
	if len(sd.Fields) != len(cols) {
		return buf, fmt.Errorf("describe %s: %d columns for %d", table, len(sd.Fields), len(cols))
	}
	oids := make([]uint32, len(cols))
	for i, f := range sd.Fields {
		oids[i] = f.DataTypeOID
	}
	for i := range rows.Len() {
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(cols)))
		if buf, err = rows.appendRow(m, buf, i, oids); err != nil {
			return buf, fmt.Errorf("encode a row of %s: %w", table, err)
		}
	}
	buf = binary.BigEndian.AppendUint16(buf, math.MaxUint16) // the trailer: -1
	if _, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf), "copy "+name+" ( "+list+" ) from stdin binary;"); err != nil {
		return buf, err
	}
	return buf, nil
}

// appendField appends v as a binary COPY field of the type oid names: its
// length and bytes, or -1 for NULL.
func appendField(m *pgtype.Map, buf []byte, oid uint32, v any) ([]byte, error) {
	at := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	out, ok := appendScalar(buf, oid, v)
	var err error
	if !ok {
		out, ok, err = appendParamArray(buf, oid, v)
	}
	if !ok {
		out, err = m.Encode(oid, pgtype.BinaryFormatCode, v, buf)
	}
	if err != nil {
		return buf[:at], err
	}
	if out == nil { // NULL
		return binary.BigEndian.AppendUint32(buf[:at], math.MaxUint32), nil
	}
	binary.BigEndian.PutUint32(out[at:], uint32(len(out)-at-4))
	return out, nil
}

// appendScalar appends the binary form of the scalars the write path
// COPYs (ok), as pgx would encode them; a nil []byte is NULL (nil, true).
func appendScalar(buf []byte, oid uint32, v any) ([]byte, bool) {
	switch x := v.(type) {
	case int32:
		if oid == pgtype.Int4OID {
			return binary.BigEndian.AppendUint32(buf, uint32(x)), true
		}
	case int64:
		if oid == pgtype.Int8OID {
			return binary.BigEndian.AppendUint64(buf, uint64(x)), true
		}
	case float64:
		if oid == pgtype.Float8OID {
			return binary.BigEndian.AppendUint64(buf, math.Float64bits(x)), true
		}
	case bool:
		if oid == pgtype.BoolOID {
			return appendBool(buf, x), true
		}
	case time.Time:
		if oid == pgtype.TimestamptzOID {
			return appendTime(buf, x), true
		}
	case []byte:
		if oid == pgtype.JSONBOID {
			if x == nil {
				return nil, true
			}
			return appendJSONB(buf, x), true
		}
	}
	return nil, false
}
