package app

import (
	"maps"
	"testing"

	"github.com/nbs-project/nbs/internal/schema"
)

// --labels: what Set accepts has valid keys and reads back the same from
// its String form.
func FuzzLabelsFlag(f *testing.F) {
	for _, s := range []string{"customer=acme", "customer=acme,region=eu", " a=b , c=d=e ", "Customer=x", "novalue", ",,", "a=", "a=\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var l Labels
		if err := l.Set(s); err != nil {
			return
		}
		for k := range l {
			if !schema.ValidLabelKey(k) {
				t.Fatalf("Set(%q) accepted key %q", s, k)
			}
		}
		var back Labels
		if err := back.Set(l.String()); err != nil || !maps.Equal(back, l) {
			t.Fatalf("Set(%q) = %v; its String %q reads back %v, %v", s, l, l.String(), back, err)
		}
	})
}
