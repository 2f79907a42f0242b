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

// Maps are read as PostgreSQL writes jsonb; anything else is refused, not
// misread.
func TestEachCount(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // "" = refused
	}{
		{`{}`, "map[]"},
		{`{"no_socket": 3, "abort": 12}`, "map[abort:12 no_socket:3]"},
		{`{"300":1,"310":2}`, "map[300:1 310:2]"},
		{`{"a": 6.0}`, "map[a:6]"},
		{`{"a": -1}`, ""},
		{`{"a": "1"}`, ""},
		{`{"a\"b": 1}`, ""},
		{`{"a": 1,}`, ""},
		{`[{"a": 1}]`, ""},
		{`{"a": 1`, ""},
	} {
		got := map[string]uint64{}
		err := eachCount([]byte(c.in), func(k string, v uint64) { got[k] += v })
		switch {
		case c.want == "" && err == nil:
			t.Errorf("eachCount(%s) = %v, want refused", c.in, got)
		case c.want != "" && (err != nil || fmt.Sprint(got) != c.want):
			t.Errorf("eachCount(%s) = %v %v, want %s", c.in, got, err, c.want)
		}
	}
}
