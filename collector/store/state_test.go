package store

import (
	"context"
	"testing"
	"time"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// State's numbers are the wire's, so ingest converts without a table and
// Severity can rank a stored state as schema does.
func TestStatesAreTheWireStates(t *testing.T) {
	for s, w := range map[State]nbsv1.State{
		StateUnspecified: nbsv1.State_STATE_UNSPECIFIED, StateOK: nbsv1.State_STATE_OK, StateWarn: nbsv1.State_STATE_WARN,
		StateCrit: nbsv1.State_STATE_CRIT, StateUnknown: nbsv1.State_STATE_UNKNOWN,
	} {
		if int32(s) != int32(w) {
			t.Errorf("%s = %d, the wire's %v = %d", s, s, w, w)
		}
	}
	if Worse(StateCrit, StateUnknown) != StateCrit || Worse(StateUnknown, StateOK) != StateUnknown || StateWarn.Severity() <= StateUnknown.Severity() {
		t.Error("store's severity order differs from OK < UNKNOWN < WARN < CRIT")
	}
}

// The worst state over a step or a window ranks states by severity, not by
// their numbers: CRIT (3) beats UNKNOWN (4), and WARN (2) beats UNKNOWN.
func TestWorstStateRanksBySeverity(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "n1", InstanceID: 7, IntervalMS: 500})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: KindRate},
		{Path: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: KindRate},
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	// Two reports per one-second step: the root's states, then the child's.
	steps := []struct {
		root, sent [2]State
		want       State // the root's worst in the step
	}{
		{[2]State{StateOK, StateUnknown}, [2]State{StateOK, StateOK}, StateUnknown},
		{[2]State{StateUnknown, StateWarn}, [2]State{StateUnknown, StateWarn}, StateWarn},
		{[2]State{StateCrit, StateUnknown}, [2]State{StateUnknown, StateOK}, StateCrit},
		{[2]State{StateOK, StateOK}, [2]State{StateOK, StateOK}, StateOK},
	}
	var reports []Report
	for i, s := range steps {
		for j := range 2 {
			reports = append(reports, Report{NodeID: node, InstanceID: 7, Seq: uint64(2*i + j + 1),
				Time: t0.Add(time.Duration(i)*time.Second + time.Duration(j)*500*time.Millisecond), IntervalMS: 500,
				Samples: []Sample{
					{MetricID: ids["tcp_reset"], Path: "tcp_reset", Value: 1, State: s.root[j]},
					{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Value: 1, State: s.sent[j]},
				}})
		}
	}
	if _, err := st.WriteReports(ctx, reports); err != nil {
		t.Fatal(err)
	}
	buckets, err := st.Series(ctx, node, "tcp_reset", t0, t0.Add(time.Duration(len(steps))*time.Second), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(buckets) != len(steps) {
		t.Fatalf("series: %d buckets, want %d", len(buckets), len(steps))
	}
	for i, b := range buckets {
		if b.Worst != steps[i].want {
			t.Errorf("step %d (%v): worst %s, want %s", i, steps[i].root, b.Worst, steps[i].want)
		}
	}
	recent, err := st.RecentByMetric(ctx, node, t0)
	if err != nil {
		t.Fatal(err)
	}
	if recent["tcp_reset"].Worst != StateCrit || recent["tcp_reset/sent"].Worst != StateWarn {
		t.Errorf("recent worst: root %s, sent %s; want crit, warn", recent["tcp_reset"].Worst, recent["tcp_reset/sent"].Worst)
	}
}
