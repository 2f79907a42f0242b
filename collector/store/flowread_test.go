package store

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A window is covered by the coarsest buckets that fit, exactly.
func TestFlowSources(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		from, to string
		want     string
	}{
		{"2026-01-02T10:03:00Z", "2026-01-02T10:08:00Z", "60 10:03-10:08"},
		{"2026-01-02T10:00:00Z", "2026-01-02T11:00:00Z", "3600 10:00-11:00"},
		{"2026-01-02T09:58:00Z", "2026-01-02T12:02:00Z", "60 09:58-10:00, 3600 10:00-12:00, 60 12:00-12:02"},
		{"2026-01-01T23:00:00Z", "2026-01-04T01:30:00Z", "3600 23:00-00:00, 86400 00:00-00:00, 3600 00:00-01:00, 60 01:00-01:30"},
	}
	for _, c := range cases {
		var got []string
		var covered time.Duration
		for _, s := range FlowSources(at(c.from), at(c.to)) {
			got = append(got, fmt.Sprintf("%d %s-%s", s.Res, s.From.Format("15:04"), s.To.Format("15:04")))
			covered += s.To.Sub(s.From)
		}
		if strings.Join(got, ", ") != c.want || covered != at(c.to).Sub(at(c.from)) {
			t.Errorf("FlowSources(%s, %s) = %s (covering %s), want %s", c.from, c.to, strings.Join(got, ", "), covered, c.want)
		}
	}
}
