package bpfload

import (
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
)

// LookupSum reads key from a per-CPU map m and returns its values summed
// over CPUs (see Sum). The lookup's error is returned as it is, for the
// caller to say what it was reading; errors.Is(err, ebpf.ErrKeyNotExist)
// tells an absent key.
func LookupSum[T any](m *ebpf.Map, key any) (T, error) {
	if sum, ok, err := lookupWords[T](m, key); ok {
		return sum, err
	}
	var per []T
	if err := m.Lookup(key, &per); err != nil {
		var zero T
		return zero, err
	}
	return Sum(per)
}

// Sum adds up per-CPU values field by field: T is an unsigned integer, or
// an array or struct (a bpf2go type) of them, whose blank fields (padding,
// structs.HostLayout) are skipped. Sums wrap as the kernel's counters do.
// Any other T is an error, whether or not there are values to add.
func Sum[T any](per []T) (T, error) {
	var sum T
	if err := summable(reflect.TypeFor[T]()); err != nil {
		return sum, fmt.Errorf("sum per-CPU %T: %w", sum, err)
	}
	dst := reflect.ValueOf(&sum).Elem()
	for i := range per {
		add(dst, reflect.ValueOf(&per[i]).Elem())
	}
	return sum, nil
}

func summable(t reflect.Type) error {
	switch t.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint, reflect.Uintptr:
		return nil
	case reflect.Array:
		return summable(t.Elem())
	case reflect.Struct:
		for f := range t.Fields() {
			if f.Name == "_" {
				continue
			}
			if !f.IsExported() {
				return fmt.Errorf("field %s is unexported", f.Name)
			}
			if err := summable(f.Type); err != nil {
				return fmt.Errorf("field %s: %w", f.Name, err)
			}
		}
		return nil
	}
	return fmt.Errorf("%s is not an unsigned integer", t)
}

// add adds src to dst; both are addressable values of a summable type.
func add(dst, src reflect.Value) {
	switch dst.Kind() {
	case reflect.Array:
		// Histograms are arrays of hundreds of uint64 buckets: add those as
		// a slice rather than through reflect one by one.
		if dst.Type().Elem() == reflect.TypeFor[uint64]() {
			d := dst.Slice(0, dst.Len()).Interface().([]uint64)
			s := src.Slice(0, src.Len()).Interface().([]uint64)
			for i := range d {
				d[i] += s[i]
			}
			return
		}
		for i := range dst.Len() {
			add(dst.Index(i), src.Index(i))
		}
	case reflect.Struct:
		for i := range dst.NumField() {
			if dst.Type().Field(i).Name != "_" {
				add(dst.Field(i), src.Field(i))
			}
		}
	default:
		dst.SetUint(dst.Uint() + src.Uint())
	}
}
