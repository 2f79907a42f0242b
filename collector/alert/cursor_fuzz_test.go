package alert

import (
	"encoding/base64"
	"testing"
)

// A cursor is whatever a client sends back: parseAlertCursor takes only
// what String wrote (so it round-trips exactly) with ranks in range and a
// positive id, and refuses everything else.
func FuzzAlertCursor(f *testing.F) {
	for _, s := range []string{
		alertCursor{0, 0, 1}.String(), alertCursor{2, 2, 1 << 62}.String(), "", "a1.0.0.1", "!!!",
		base64.RawURLEncoding.EncodeToString([]byte("a1.0.0.-1")), base64.RawURLEncoding.EncodeToString([]byte("a1.1.1.1\n")),
		base64.StdEncoding.EncodeToString([]byte("a1.1.1.1")),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseAlertCursor(s)
		if err != nil {
			return
		}
		if c.String() != s {
			t.Errorf("parseAlertCursor(%q) = %+v, which writes %q", s, c, c.String())
		}
		if c.StateRank < 0 || c.StateRank > maxStateRank || c.SevRank < 0 || c.SevRank > maxSevRank || c.ID < 1 {
			t.Errorf("parseAlertCursor(%q) = %+v: out of range", s, c)
		}
	})
}
