package bpfload

import (
	"strings"
	"structs"
	"testing"
)

// counters is shaped like a bpf2go type: a HostLayout marker, padding and
// an array beside the counters.
type counters struct {
	_      structs.HostLayout
	Hits   uint64
	Small  uint32
	_      [4]byte
	Bucket [3]uint64
	Nested struct{ A, B uint16 }
}

func TestSum(t *testing.T) {
	t.Run("uint64", func(t *testing.T) {
		got, err := Sum([]uint64{1, 2, 1 << 63, 1 << 63})
		if err != nil || got != 3 { // wraps, as the kernel's counters do
			t.Fatalf("Sum = %d, %v; want 3", got, err)
		}
	})
	t.Run("struct", func(t *testing.T) {
		per := []counters{
			{Hits: 1, Small: 2, Bucket: [3]uint64{1, 0, 5}, Nested: struct{ A, B uint16 }{1, 2}},
			{Hits: 10, Small: 20, Bucket: [3]uint64{0, 7, 5}, Nested: struct{ A, B uint16 }{3, 4}},
		}
		got, err := Sum(per)
		want := counters{Hits: 11, Small: 22, Bucket: [3]uint64{1, 7, 10}, Nested: struct{ A, B uint16 }{4, 6}}
		if err != nil || got != want {
			t.Fatalf("Sum = %+v, %v; want %+v", got, err, want)
		}
	})
	t.Run("array of structs", func(t *testing.T) {
		type pair struct{ A, B uint8 }
		got, err := Sum([][2]pair{{{1, 2}, {3, 4}}, {{10, 20}, {30, 40}}})
		if want := [2]pair{{11, 22}, {33, 44}}; err != nil || got != want {
			t.Fatalf("Sum = %v, %v; want %v", got, err, want)
		}
	})
	t.Run("no CPUs", func(t *testing.T) {
		got, err := Sum[counters](nil)
		if err != nil || got != (counters{}) {
			t.Fatalf("Sum(nil) = %+v, %v", got, err)
		}
	})
}

// A type Sum cannot add is an error naming the field, even with nothing to
// add, so a probe's mistake shows on its first read.
func TestSumRejects(t *testing.T) {
	type withSigned struct {
		Count uint64
		Delta int64
	}
	type withUnexported struct {
		Count  uint64
		hidden uint64
	}
	type withString struct{ Name string }
	for _, tc := range []struct {
		name string
		sum  func() error
		want string
	}{
		{"signed field", func() error { _, err := Sum[withSigned](nil); return err }, "field Delta: int64 is not an unsigned integer"},
		{"unexported field", func() error { _, err := Sum([]withUnexported{{}}); return err }, "field hidden is unexported"},
		{"string", func() error { _, err := Sum([]withString{{"a"}}); return err }, "field Name: string is not"},
		{"float", func() error { _, err := Sum([]float64{1}); return err }, "float64 is not an unsigned integer"},
		{"pointer", func() error { _, err := Sum([]*uint64{nil}); return err }, "*uint64 is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sum()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
