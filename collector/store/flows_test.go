package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestCounterparts: a reset A received is joined to the reset B sent (same
// src and dst) and to the packet of A's that B dropped (swapped), within
// the window, for the protocol asked, never to A's own evidence, only from
// nodes the caller's scope sees, never from another tenant whose address
// space overlaps (whoever asks, an admin too), and, with an address-space
// label, only from nodes of A's space.
func TestCounterparts(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	const (
		aEnd = "10.0.0.1:40000"
		bEnd = "10.0.0.2:9"
	)
	t0 := time.Now().Truncate(time.Millisecond)
	type ev struct {
		metric   string
		src, dst string
		proto    string
		at       time.Duration
	}
	nodes := []struct {
		name   string
		labels map[string]string
		events []ev
	}{
		{"a", map[string]string{"customer": "acme", "cluster": "west"}, []ev{
			{"tcp_reset/received/syn_sent", bEnd, aEnd, "", 0},
			{"tcp_reset/sent/no_socket", bEnd, aEnd, "", 0}, // its own: never a counterpart
		}},
		// The same tenant's other cluster, reusing the same private
		// addresses: a counterpart unless the cluster is an address space.
		{"c", map[string]string{"customer": "acme", "cluster": "east"}, []ev{
			{"tcp_reset/sent/no_socket", bEnd, aEnd, "", 200 * time.Millisecond},
		}},
		{"b", map[string]string{"customer": "acme", "cluster": "west"}, []ev{
			{"tcp_reset/sent/no_socket", bEnd, aEnd, "", 300 * time.Millisecond},
			{"drops/netfilter_drop", aEnd, bEnd, "tcp", -100 * time.Millisecond},
			{"drops/no_socket", aEnd, bEnd, "udp", 0},                      // another protocol
			{"tcp_reset/sent/tcp_state", bEnd, aEnd, "", 10 * time.Second}, // outside the window
			{"tcp_reset/sent/no_socket", bEnd, "10.0.0.1:40001", "", 0},    // another flow
		}},
		{"g", map[string]string{"customer": "globex"}, []ev{
			{"tcp_reset/sent/not_specified", bEnd, aEnd, "", 50 * time.Millisecond},
		}},
	}
	ids := map[string]int32{}
	for _, n := range nodes {
		id, err := st.UpsertNode(ctx, store.Node{Name: n.name, Labels: n.labels, Tenant: n.labels["customer"], InstanceID: 1, IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		ids[n.name] = id
		var defs []store.MetricDef
		for _, e := range n.events {
			defs = append(defs, store.MetricDef{Path: e.metric, Kind: store.KindRate})
		}
		mids, err := st.UpsertDefinitions(ctx, id, defs)
		if err != nil {
			t.Fatal(err)
		}
		r := store.Report{NodeID: id, InstanceID: 1, Seq: 1, Time: t0, IntervalMS: 1000}
		for _, e := range n.events {
			f := map[string]string{"src": e.src, "dst": e.dst, "reason": e.metric}
			if e.proto != "" {
				f["protocol"] = e.proto
			}
			r.Events = append(r.Events, store.Event{MetricID: mids[e.metric], Path: e.metric, Time: t0.Add(e.at), Fields: f})
		}
		if _, err := st.WriteReports(ctx, []store.Report{r}); err != nil {
			t.Fatal(err)
		}
	}
	probe := store.FlowProbe{Src: bEnd, Dst: aEnd, Protocol: "tcp", From: t0.Add(-2 * time.Second), To: t0.Add(2 * time.Second), Near: t0}
	customer := func(sel access.Selector) store.Scope {
		return access.Principal{Name: "c", Role: access.RoleCustomer, Via: access.ViaToken, Selector: sel}
	}
	acmeAll := []string{"b drops/netfilter_drop", "c tcp_reset/sent/no_socket", "b tcp_reset/sent/no_socket"}
	cases := []struct {
		name     string
		scope    store.Scope
		space    string
		perProbe int
		want     []string // node metric, nearest first
	}{
		// g is globex's, with the very same addresses: never a counterpart.
		{"every node", store.All{}, "", 10, acmeAll},
		{"a viewer", access.Principal{Name: "v", Role: access.RoleViewer, Via: access.ViaToken}, "", 10, acmeAll},
		{"acme sees only acme", customer(access.Selector{"customer": "acme"}), "", 10, acmeAll},
		{"acme, nearest only", customer(access.Selector{"customer": "acme"}), "", 1, []string{"b drops/netfilter_drop"}},
		{"another tenant", customer(access.Selector{"customer": "initech"}), "", 10, nil},
		{"globex's own scope", customer(access.Selector{"customer": "globex"}), "", 10, nil},
		{"nobody", access.Principal{}, "", 10, nil},
		{"clusters are address spaces", store.All{}, "cluster", 10, []string{"b drops/netfilter_drop", "b tcp_reset/sent/no_socket"}},
		{"a label nobody has", store.All{}, "rack", 10, acmeAll},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := st.Counterparts(ctx, c.scope, ids["a"], c.space, []store.FlowProbe{probe, {Src: "x", Dst: "y", Protocol: "tcp", From: t0, To: t0, Near: t0}}, c.perProbe)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || len(got[1]) != 0 {
				t.Fatalf("answer %+v: want one entry per probe, nothing for the unknown flow", got)
			}
			var names []string
			for _, cp := range got[0] {
				names = append(names, fmt.Sprintf("%s %s", cp.Node, cp.Metric))
				if cp.Fields["reason"] != cp.Metric {
					t.Errorf("counterpart %+v: fields not those stored", cp)
				}
			}
			if !slices.Equal(names, c.want) {
				t.Errorf("counterparts %v, want %v", names, c.want)
			}
		})
	}
	// Each orientation's lookup is an index condition on the endpoints
	// (events_flow), not a filter over every event of the window. Sequential
	// scans are priced out so that a table this small cannot hide the plan.
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN SELECT e.ts FROM events e WHERE e.fields ? 'src' AND e.fields->>'src' = $1
		AND e.fields->>'dst' = $2 AND e.ts >= $3 AND e.ts <= $4`, bEnd, aEnd, t0.Add(-time.Second), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "Index Cond: (((fields ->> 'src'::text)") {
		t.Errorf("the flow lookup does not use the endpoints index:\n%s", plan.String())
	}
}
