package ping

import (
	"strings"
	"testing"
)

// Ping targets come from a flag and from the collector's peer list: a
// target parses or is an error, and what parses reads back the same from
// its "name=host" form.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "gw=10.0.0.1", "web-1=web-1.example.com", "::ffff:10.0.0.1", "fe80::1%eth0",
		"=10.0.0.1", "x=", "0.0.0.0", "224.0.0.1", "bad_host", " a = 2001:db8::1 ", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		if tg.Host == "" || tg.Name == "" || len(tg.Name) > 128 {
			t.Fatalf("ParseTarget(%q) = %+v", s, tg)
		}
		back, err := ParseTarget(tg.Name + "=" + tg.Host)
		if err != nil || back != tg {
			t.Fatalf("ParseTarget(%q) = %+v, its name=host form reads %+v, %v", s, tg, back, err)
		}
		_ = tg.ID()
		if strings.Contains(s, ",") {
			return // a list, not one target
		}
		if _, err := ParseTargets(s + "," + s); err != nil {
			t.Fatalf("ParseTargets of %q twice: %v", s, err)
		}
	})
}
