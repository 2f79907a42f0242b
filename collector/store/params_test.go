package store

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// appendParamArray writes what pgx writes for the same argument, byte for byte:
// the database reads either alike.
func TestAppendArrayAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	at := time.Date(2026, 11, 29, 21, 45, 1, 123456789, time.FixedZone("x", 3600))
	before := time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	s1, s2 := "a,b/c", ""
	for _, tc := range []struct {
		oid uint32
		arg any
	}{
		{pgtype.Int4ArrayOID, []int32{1, -1, math.MaxInt32, math.MinInt32, 0, 300}},
		{pgtype.Int4ArrayOID, []int32{}},
		{pgtype.Int4ArrayOID, []int32(nil)},
		{pgtype.Int8ArrayOID, []int64{1, -1, math.MaxInt64, math.MinInt64}},
		{pgtype.Int2ArrayOID, []int16{1, -1, math.MaxInt16, math.MinInt16}},
		{pgtype.Float8ArrayOID, []float64{0, -0.5, 1e300, math.Inf(1), math.NaN(), math.SmallestNonzeroFloat64}},
		{pgtype.Float8ArrayOID, []float64(nil)},
		{pgtype.BoolArrayOID, []bool{true, false, true}},
		{pgtype.BoolArrayOID, []bool(nil)},
		{pgtype.TimestamptzArrayOID, []time.Time{at, before, time.Unix(0, 0)}},
		{pgtype.TimestamptzArrayOID, []*time.Time{&at, nil, &before}},
		{pgtype.TimestamptzArrayOID, []*time.Time{nil, nil}},
		{pgtype.TextArrayOID, []*string{&s1, nil, &s2}},
		{pgtype.TextArrayOID, []*string{}},
		{pgtype.TextArrayOID, []string{"x", "", "ü"}},
		{pgtype.JSONBArrayOID, [][]byte{[]byte(`{"a":1}`), nil, []byte(`{}`)}},
		{pgtype.JSONBArrayOID, [][]byte{nil}},
		{pgtype.JSONBArrayOID, [][]byte(nil)},
	} {
		t.Run(fmt.Sprintf("%d %T %v", tc.oid, tc.arg, tc.arg), func(t *testing.T) {
			want, err := m.Encode(tc.oid, pgtype.BinaryFormatCode, tc.arg, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := appendParamArray(nil, tc.oid, tc.arg)
			if err != nil || !ok {
				t.Fatalf("appendParamArray: %v, %v", ok, err)
			}
			if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
				t.Errorf("appendParamArray = %x (nil %v), pgx %x (nil %v)", got, got == nil, want, want == nil)
			}
			// Appended after other bytes, the same.
			got, _, _ = appendParamArray([]byte("prefix"), tc.oid, tc.arg)
			if want != nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("after a prefix: %x", got)
			}
		})
	}
	// A type it does not write for that OID is pgx's to encode.
	for _, tc := range []struct {
		oid uint32
		arg any
	}{{pgtype.Int8ArrayOID, []int32{1}}, {pgtype.Int4OID, int32(1)}, {pgtype.TextArrayOID, [][]byte{nil}}} {
		if _, ok, _ := appendParamArray(nil, tc.oid, tc.arg); ok {
			t.Errorf("appendParamArray took %T for OID %d", tc.arg, tc.oid)
		}
	}
}

// A COPY field is its length and what pgx writes for the value, or -1 for
// NULL, for the scalars and arrays appendField writes itself and for what
// it leaves to pgx.
func TestAppendFieldAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	at := time.Date(2026, 11, 29, 22, 10, 0, 987654321, time.FixedZone("y", -7200))
	for _, tc := range []struct {
		oid uint32
		arg any
	}{
		{pgtype.Int4OID, int32(-7)},
		{pgtype.Int4OID, int32(1 << 30)},
		{pgtype.Int8OID, int64(math.MinInt64)},
		{pgtype.Float8OID, -1.5e-300},
		{pgtype.BoolOID, true},
		{pgtype.BoolOID, false},
		{pgtype.TimestamptzOID, at},
		{pgtype.JSONBOID, []byte(`{"k":"v"}`)},
		{pgtype.JSONBOID, []byte(nil)},
		{pgtype.Int4ArrayOID, []int32{3, 1}},
		{pgtype.Int4ArrayOID, []int32(nil)},
		{pgtype.Int8ArrayOID, []int64{5}},
		{pgtype.TextOID, "left to pgx"},
		{pgtype.Int8OID, int32(9)}, // not its type for the OID: pgx's
		{pgtype.Int4OID, nil},
	} {
		t.Run(fmt.Sprintf("%d %T %v", tc.oid, tc.arg, tc.arg), func(t *testing.T) {
			enc, err := m.Encode(tc.oid, pgtype.BinaryFormatCode, tc.arg, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []byte("row")
			if enc == nil {
				want = append(want, 0xff, 0xff, 0xff, 0xff)
			} else {
				want = append(append(want, byte(len(enc)>>24), byte(len(enc)>>16), byte(len(enc)>>8), byte(len(enc))), enc...)
			}
			got, err := appendField(m, []byte("row"), tc.oid, tc.arg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("appendField = %x, want %x", got, want)
			}
		})
	}
}
