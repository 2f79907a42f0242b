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

// flowSums sums rows per edge whatever their order: the guess of a node's
// next edge saves lookups when rows come in the order they were written,
// and is only a guess otherwise. Each case is summed as readFlowEdges
// does (a guess checked key by key, else the edge looked up) and against
// a map of every row's edge.
func TestFlowSums(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	type in struct {
		node, bucket, edge int
	}
	// rowOf is row i of a case: edge e of node n in bucket b (a minute,
	// or the hour for b < 0), its counts made from i.
	rowOf := func(i int, x in) (FlowEdgeRow, flowSumKey) {
		first, res := t0.Add(time.Duration(x.bucket)*time.Minute), int64(60)
		if x.bucket < 0 {
			first, res = t0.Add(-time.Hour), 3600
		}
		r := FlowEdgeRow{NodeID: int32(x.node), Tenant: "acme", First: first, End: first.Add(time.Duration(res) * time.Second),
			FlowEdge: FlowEdge{Local: FlowOwner{ID: fmt.Sprintf("pod:a-%d", x.edge%3), Name: fmt.Sprintf("a-%d@%d", x.edge%3, x.bucket)},
				Role: FlowRole(1 + x.edge%2), LocalAddr: "10.0.0.1", PeerAddr: fmt.Sprintf("10.0.1.%d", x.edge), PeerPort: 80,
				FlowCounters: FlowCounters{Opened: uint64(i + 1), BytesSent: uint64(1000 * (i + 1))}}}
		if i%4 == 0 {
			r.ResetsSent = map[string]uint64{"no_socket": uint64(i)}
		}
		return r, flowSumKey{node: r.NodeID, role: r.Role, owner: uint32(x.edge % 3), laddr: 1, paddr: uint32(100 + x.edge), pport: 80}
	}
	// inOrder: nodes × buckets × edges, each node's edges in one order.
	inOrder := func(nodes, buckets, edges int) []in {
		var out []in
		for b := range buckets {
			for n := range nodes {
				for e := range edges {
					out = append(out, in{n + 1, b, e})
				}
			}
		}
		return out
	}
	reversed := inOrder(2, 3, 5)
	for i := 5; i < 10; i++ { // node 2's first bucket, in reverse
		reversed[i].edge = 9 - i
	}
	shuffled := inOrder(3, 4, 6)
	for i := range shuffled {
		j := (i*7 + 3) % len(shuffled)
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	cases := []struct {
		name    string
		rows    []in
		mapless bool // every guess right: no lookup, no map
	}{
		{"one bucket", inOrder(3, 1, 8), true},
		{"buckets in order", inOrder(3, 5, 8), true},
		{"an edge new in a later bucket", append(inOrder(2, 2, 4), in{1, 2, 0}, in{1, 2, 7}, in{1, 2, 1}, in{1, 2, 2}, in{1, 2, 3}), false},
		{"an edge gone from a later bucket", append(inOrder(1, 2, 5), in{1, 2, 0}, in{1, 2, 2}, in{1, 2, 3}, in{1, 2, 4}), false},
		{"a bucket read again after another", append(inOrder(1, 2, 3), in{1, 0, 5}, in{1, 1, 5}), false},
		{"order differs by bucket", reversed, false},
		{"shuffled", shuffled, false},
		{"hour and minutes of one node", append([]in{{1, -1, 0}, {1, -1, 1}, {1, -1, 2}}, inOrder(1, 3, 3)...), true},
	}
	for _, c := range cases {
		var s flowSums
		want := map[FlowRowKey]*FlowEdgeRow{}
		var order []FlowRowKey
		for i, x := range c.rows {
			r, k := rowOf(i, x)
			key := r.Key()
			if w := want[key]; w == nil {
				cp := r
				want[key] = &cp
				order = append(order, key)
			} else {
				addFlowRow(w, &r)
			}
			ns := s.node(r.NodeID, flowBucket{int64(r.End.Sub(r.First).Seconds()), r.First.Unix()})
			if e := s.expect(ns); e != nil && e.Key() == key {
				r.Local.ID, r.LocalAddr, r.PeerAddr = "", "", "" // the hit decodes none
				s.hit(ns, &r)
				continue
			}
			s.add(ns, k, &r)
		}
		got := s.out.rows().Slice()
		if len(got) != len(want) {
			t.Errorf("%s: %d sums, want %d", c.name, len(got), len(want))
			continue
		}
		for i, g := range got {
			w := want[order[i]]
			if g.Key() != order[i] || fmt.Sprint(g) != fmt.Sprint(*w) {
				t.Errorf("%s: sum %d\n%+v\nwant\n%+v", c.name, i, g, *w)
			}
		}
		if c.mapless != (s.at == nil) {
			t.Errorf("%s: map built %v, want %v", c.name, s.at != nil, !c.mapless)
		}
	}
}
