package alert

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

// An alert rule is JSON an operator sends: decodeRule returns a valid rule
// or an error, and a valid rule re-encodes to one that validates again.
func FuzzRuleJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"TcpResetStorm","metric":"tcp_reset","state":"crit","for_intervals":3,"severity":"page"}`,
		`{"name":"Fleet","kind":"fleet","metric":"tcp_reset/*","state":"warn","min_nodes":2,"min_percent":50,"group_by":["customer"],"selector":{"customer":"acme"},"labels":{"team":"net"},"runbook_url":"https://example.com/rb","enabled":false}`,
		`{"name":"1bad","metric":"TCP","state":"hot","for_seconds":-1}`,
		`{"name":"X","labels":{"alertname":"y"}}`,
		`{"name":"X","min_percent":1e400}`,
		`{"name":"X","group_by":["a","b","c","d","e","f"]}`,
		`{"name":"X"} 1`, `{}`, ``, `"x"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/api/v1/alert-rules", strings.NewReader(body))
		rule, err := decodeRule(r)
		if err != nil {
			return
		}
		b, err := json.Marshal(rule)
		if err != nil {
			t.Fatalf("valid rule %q does not encode: %v", body, err)
		}
		var back Rule
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("re-encoded rule %s does not decode: %v", b, err)
		}
		if err := back.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("Validate = %v, want an ErrInvalidRule", err)
			}
			t.Fatalf("re-encoded rule %s is invalid: %v", b, err)
		}
	})
}
