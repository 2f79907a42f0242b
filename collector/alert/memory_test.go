package alert

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

const (
	readMemory   = `nbs_collector_alert_reports_read_total{source="memory"}`
	readDatabase = `nbs_collector_alert_reports_read_total{source="database"}`
	overflowed   = `nbs_collector_alert_handover_overflow_total`
)

// The leader's own reports reach the engine from memory, without being read
// back; when the hand-over has no room (for the reports, or even for their
// nodes) they are read from the database instead and nothing is lost.
// Either way the same alert fires and resolves, also when one node's
// reports are handed over out of order (two writer workers commit
// independently): they are evaluated in report order, as the database
// returns them.
func TestAlertReportsFromMemory(t *testing.T) {
	cases := []struct {
		name                 string
		maxReports, maxMiss  int
		wantMemory, wantRead float64 // of the three reports after the first
		wantOverflow         float64 // of all four
	}{
		{"memory", handoverReports, handoverMissed, 3, 0, 0},
		{"no room: the nodes from the database", 0, handoverMissed, 0, 3, 4},
		{"no room for the nodes either: every node from the database", 0, 0, 0, 3, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rcv := newReceivers(t)
			f := newFixture(t, pgcluster.Database(t))
			svc := startWith(t, f.st, rcv.config(t), "only", func(s *Service) {
				s.handover.maxReports, s.handover.maxMissed = c.maxReports, c.maxMiss
			})
			waitLeading(t, svc)
			// The first report may be read from the database: a node is
			// read there once in a term before memory can stand for it.
			f.report(t, svc.Service, 0)
			waitFor(t, 5*time.Second, func() string {
				if m := scrape(t, svc.metrics); m[readMemory]+m[readDatabase] != 1 {
					return fmt.Sprintf("read %v from memory, %v from the database; want the first report", m[readMemory], m[readDatabase])
				}
				return ""
			})
			before := scrape(t, svc.metrics)

			// Two CRIT reports, committed together, handed over newest first.
			crit := []store.Report{f.next(187), f.next(187)}
			if _, err := f.st.WriteReports(context.Background(), crit); err != nil {
				t.Fatal(err)
			}
			svc.OnStored([]store.Report{crit[1], crit[0]})
			firing := "firing:NBSRootCritical:web-1:tcp_reset/sent/no_socket"
			waitFor(t, 3*time.Second, func() string {
				if ev := rcv.events(); fmt.Sprint(ev) != fmt.Sprint([]string{firing}) {
					return fmt.Sprintf("webhook events %v, want %s", ev, firing)
				}
				return ""
			})
			f.report(t, svc.Service, 0)
			waitFor(t, 3*time.Second, func() string {
				if ev := rcv.events(); len(ev) != 2 || ev[1] != strings.Replace(firing, "firing", "resolved", 1) {
					return fmt.Sprintf("webhook events %v, want firing then resolved", ev)
				}
				return ""
			})
			m := scrape(t, svc.metrics)
			if got, want := m[readMemory]-before[readMemory], c.wantMemory; got != want {
				t.Errorf("%v reports read from memory, want %v", got, want)
			}
			if got, want := m[readDatabase]-before[readDatabase], c.wantRead; got != want {
				t.Errorf("%v reports read from the database, want %v", got, want)
			}
			if m[overflowed] != c.wantOverflow {
				t.Errorf("%s = %v, want %v", overflowed, m[overflowed], c.wantOverflow)
			}
		})
	}
}

// Reports handed over to a leader that stops before evaluating them (a
// term change) are neither lost nor counted twice: the next leader reads
// them from the database, from its predecessor's watermark on, and the
// alert fires once and resolves once. Either the leader stops right after
// the hand-over (it may have fired, or not even read them), or the reports
// arrive after its evaluator's last cycle (the writer saw it leading a
// moment too long): they stay in its hand-over, never evaluated there.
func TestAlertHandoverAcrossTermChange(t *testing.T) {
	for name, late := range map[string]bool{"leader stops at once": false, "handed over after the last cycle": true} {
		t.Run(name, func(t *testing.T) {
			rcv := newReceivers(t)
			f := newFixture(t, pgcluster.Database(t))
			cfg := rcv.config(t)
			a := start(t, f.st, cfg, "a")
			waitLeading(t, a)
			b := start(t, f.st, cfg, "b")
			f.report(t, a.Service, 0)
			waitFor(t, 5*time.Second, func() string {
				if m := scrape(t, a.metrics); m[readMemory]+m[readDatabase] != 1 {
					return "the leader has not read the first report"
				}
				return ""
			})
			crit := []store.Report{f.next(187), f.next(187)}
			if _, err := f.st.WriteReports(context.Background(), crit); err != nil {
				t.Fatal(err)
			}
			if late {
				a.stop()
				a.handover.put(crit)
			} else {
				a.OnStored(crit)
				a.stop()
			}
			waitLeading(t, b)
			f.report(t, b.Service, 187)
			firing := "firing:NBSRootCritical:web-1:tcp_reset/sent/no_socket"
			waitFor(t, 5*time.Second, func() string {
				if ev := rcv.events(); len(ev) != 1 || ev[0] != firing {
					return fmt.Sprintf("webhook events %v, want one %s", ev, firing)
				}
				return ""
			})
			// The breach started with the first CRIT report, which b was not handed.
			var since time.Time
			if err := f.st.Pool().QueryRow(context.Background(), `SELECT since FROM alert_instances WHERE rule_name = 'NBSRootCritical'`).Scan(&since); err != nil {
				t.Fatal(err)
			}
			if want := f.clock.Add(-3 * time.Second); !since.Equal(want) {
				t.Errorf("breach since %s, want %s (one interval before the first CRIT report)", since, want)
			}
			f.report(t, b.Service, 0)
			want := []string{firing, strings.Replace(firing, "firing", "resolved", 1)}
			waitFor(t, 5*time.Second, func() string {
				if ev := rcv.events(); fmt.Sprint(ev) != fmt.Sprint(want) {
					return fmt.Sprintf("webhook events %v, want %v", ev, want)
				}
				return ""
			})
		})
	}
}

// A node registered after the leader started is unknown to its evaluator
// and has never been read from the database: its first handed-over report
// sends it there (which also loads the node), and the reports after it
// come from memory.
func TestAlertNewNodeAfterLeaderStarted(t *testing.T) {
	rcv := newReceivers(t)
	f := newFixture(t, pgcluster.Database(t))
	svc := start(t, f.st, rcv.config(t), "only")
	waitLeading(t, svc)
	// Once web-1's report is read, the evaluator has loaded its nodes.
	f.report(t, svc.Service, 0)
	waitFor(t, 5*time.Second, func() string {
		if m := scrape(t, svc.metrics); m[readMemory]+m[readDatabase] != 1 {
			return "web-1's report not read"
		}
		return ""
	})
	before := scrape(t, svc.metrics)
	ctx := context.Background()
	f.node.Name = "web-2"
	var err error
	if f.node.ID, err = f.st.UpsertNode(ctx, f.node); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.UpsertDefinitions(ctx, f.node.ID, []store.MetricDef{
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate},
		{Path: "tcp_reset/sent", Title: "Resets sent", Unit: "resets/s", Kind: store.KindRate},
		{Path: "tcp_reset/sent/no_socket", Title: "Sent: no_socket", Unit: "resets/s", Kind: store.KindRate},
	}); err != nil {
		t.Fatal(err)
	}
	f.report(t, svc.Service, 0)
	waitFor(t, 5*time.Second, func() string {
		if m := scrape(t, svc.metrics); m[readMemory]+m[readDatabase] != before[readMemory]+before[readDatabase]+1 {
			return "web-2's first report not read"
		}
		return ""
	})
	f.report(t, svc.Service, 187)
	f.report(t, svc.Service, 187)
	waitFor(t, 3*time.Second, func() string {
		if ev := rcv.events(); fmt.Sprint(ev) != "[firing:NBSRootCritical:web-2:tcp_reset/sent/no_socket]" {
			return fmt.Sprintf("webhook events %v, want web-2 firing", ev)
		}
		return ""
	})
	m := scrape(t, svc.metrics)
	fromDB, fromMem := m[readDatabase]-before[readDatabase], m[readMemory]-before[readMemory]
	if fromDB != 1 || fromMem != 2 {
		t.Errorf("read %v of web-2's reports from the database and %v from memory; want the first from the database, the others from memory",
			fromDB, fromMem)
	}
}
