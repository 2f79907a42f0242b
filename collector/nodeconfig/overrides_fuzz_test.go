package nodeconfig

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nbs-project/nbs/collector/httpjson"
)

// An override is JSON an operator sends: it decodes and validates, or it is
// an invalid-request error; a valid one re-encodes to JSON that decodes to
// an override that is still valid.
func FuzzOverrideJSON(f *testing.F) {
	for _, s := range []string{
		`{"scope":{"kind":"global"},"metric":"tcp_reset","threshold":{"comparison":"above","warn":10,"crit":100}}`,
		`{"scope":{"kind":"selector","selector":{"customer":"acme"}},"metric":"tcp_reset/sent","threshold":{"comparison":"below","warn":5,"crit":1,"hold_intervals":3}}`,
		`{"scope":{"kind":"node","node":"web-1"},"metric":"conns","disabled":true}`,
		`{"scope":{"kind":"node","node":"web-1"},"metric":"conns","threshold":{"comparison":"above","warn":2,"crit":3,"baseline_intervals":10,"floor":1}}`,
		`{"scope":{"kind":"selector","selector":{"Customer":"acme"}},"metric":"x","disabled":true}`,
		`{"scope":{"kind":"global"},"metric":"tcp_reset","threshold":{"comparison":"above","warn":1e309,"crit":1}}`,
		`{"scope":{"kind":"global"},"metric":"x","disabled":true} {}`,
		`{"bogus":1}`, ``, `null`, `[]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var o Override
		r := httptest.NewRequest("PUT", "/api/v1/threshold-overrides", strings.NewReader(body))
		if err := httpjson.Decode(r, &o); err != nil {
			return
		}
		if err := o.Validate(); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate(%q) = %v, want an ErrInvalid", body, err)
			}
			return
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatalf("valid override %q does not encode: %v", body, err)
		}
		var back Override
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("re-encoded override %s does not decode: %v", b, err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("re-encoded override %s is invalid: %v", b, err)
		}
		if back.Source() != o.Source() || back.Metric != o.Metric || back.Disabled != o.Disabled {
			t.Fatalf("override %q round-trips to %s", body, b)
		}
	})
}
