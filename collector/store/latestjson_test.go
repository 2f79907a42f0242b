package store

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"testing"
)

// TestAppendLatestJSON: the hand-written encoding of a node's newest values
// decodes to what encoding/json's does, for every shape of value and key,
// and refuses what encoding/json refuses.
func TestAppendLatestJSON(t *testing.T) {
	cases := []struct {
		name    string
		metrics map[string]LatestValue
		wantErr bool
	}{
		{"empty", map[string]LatestValue{}, false},
		{"values of every size", map[string]LatestValue{
			"a": {Value: 0}, "b": {Value: -0.5, State: StateWarn, TimeMS: 1795953636310, IntervalMS: 10000},
			"c/d": {Value: 1e-7}, "e": {Value: 1e21}, "f": {Value: 123456789.125}, "g": {Value: -3e-300},
			"h": {Value: math.MaxFloat64}, "i": {Value: 5e-324}, "j": {Value: 1e20}, "k": {Value: 0.000001},
		}, false},
		{"no value", map[string]LatestValue{"x": {NoValue: true, State: StateUnknown, TimeMS: 1}}, false},
		{"keys to escape", map[string]LatestValue{`q"uote`: {Value: 1}, `back\slash`: {Value: 2}, "tab\t": {Value: 3},
			"ünïcode/päth": {Value: 4}, "<html>&": {Value: 5}}, false},
		{"NaN", map[string]LatestValue{"n": {Value: math.NaN()}}, true},
		{"infinity", map[string]LatestValue{"n": {Value: math.Inf(-1)}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := appendLatestJSON([]byte("prefix"), latestEntries(c.metrics))
			_, jerr := json.Marshal(c.metrics)
			if (err != nil) != c.wantErr || (jerr != nil) != c.wantErr {
				t.Fatalf("error %v, encoding/json's %v, want an error: %v", err, jerr, c.wantErr)
			}
			if c.wantErr {
				return
			}
			if string(got[:6]) != "prefix" {
				t.Fatalf("overwrote what it appends to: %q", got)
			}
			var decoded map[string]LatestValue
			if err := json.Unmarshal(got[6:], &decoded); err != nil {
				t.Fatalf("%s: %v", got[6:], err)
			}
			if !reflect.DeepEqual(decoded, c.metrics) {
				t.Fatalf("decodes to %+v, want %+v (%s)", decoded, c.metrics, got[6:])
			}
			// Every object's keys in jsonb's order (shorter first, then
			// bytewise), which jsonb input checks in one pass.
			dec := json.NewDecoder(bytes.NewReader(got[6:]))
			var last []string // the last key of each open object
			key := false      // the next token in the innermost object is a key
			for {
				tok, err := dec.Token()
				if err != nil {
					break
				}
				switch tok := tok.(type) {
				case json.Delim:
					if tok == '{' {
						last, key = append(last, ""), true
					} else {
						last, key = last[:len(last)-1], true
					}
					continue
				case string:
					if key {
						prev := last[len(last)-1]
						if prev != "" && (len(prev) > len(tok) || len(prev) == len(tok) && prev >= tok) {
							t.Fatalf("key %q after %q: not jsonb's order (%s)", tok, prev, got[6:])
						}
						last[len(last)-1], key = tok, false
						continue
					}
				}
				key = true
			}
		})
	}
}

// latestEntries is metrics as queueLatest hands a node's values to
// appendLatestJSON: by key, in jsonb's order.
func latestEntries(metrics map[string]LatestValue) []latestEntry {
	var ent []latestEntry
	for k, v := range metrics {
		ent = append(ent, latestEntry{path: k, v: v})
	}
	slices.SortFunc(ent, func(a, b latestEntry) int { return latestKeyCompare(a.path, b.path) })
	return ent
}
