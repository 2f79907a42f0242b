package access

import "testing"

// A customer selector comes from a flag or an admin's request: it parses to
// a valid selector whose String form parses back to the same selector, or
// it is an error.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"customer=acme", "customer=acme,region=eu", " customer = acme ", "", "customer", "customer=",
		"Customer=acme", "customer=acme,customer=b", "a=\x00", "a=\xff", "a=b=c", ",", "k=v,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil {
			return
		}
		if err := sel.Validate(); err != nil {
			t.Fatalf("ParseSelector(%q) accepted an invalid selector: %v", s, err)
		}
		back, err := ParseSelector(sel.String())
		if err != nil {
			t.Fatalf("ParseSelector(%q).String() = %q does not parse: %v", s, sel.String(), err)
		}
		if back.String() != sel.String() || back.JSON() != sel.JSON() {
			t.Fatalf("ParseSelector(%q) round-trips to %q, want %q", s, back.String(), sel.String())
		}
		if !sel.Matches(map[string]string(sel)) {
			t.Fatalf("selector %q does not match its own labels", sel)
		}
	})
}
