package alert

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// Alerts that fired before the tenancy fix may be about a ping target named
// after another tenant's node (a node kept pinging a peer of its old mesh).
// A customer reads none of them, in the list, a detail, the groups or the
// totals, which agree; a target named like no node, the clock and the
// customer's own nodes stay; staff read them all.
func TestCustomerAlertsNameNoForeignPingTarget(t *testing.T) {
	f := newFixture(t, pgcluster.Database(t))
	ctx := context.Background()
	p := repo{f.st.Pool()}
	nodeID := map[string]int32{}
	for _, n := range []struct{ name, customer string }{{"a-0", "acme"}, {"a-1", "acme"}, {"g-0", "globex"}} {
		id, err := f.st.UpsertNode(ctx, store.Node{Name: n.name, Labels: map[string]string{"customer": n.customer}, InstanceID: 1, IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		nodeID[n.name] = id
	}
	now := time.Now()
	ids := map[string]int64{}
	for i, a := range []struct {
		key, node, metric, child, state string
	}{
		{"foreign child", "a-0", "ping", "ping/g-0/loss", "firing"},
		{"foreign metric", "a-0", "ping/g-0/kernel_rtt", "", "pending"},
		{"foreign resolved", "a-1", "ping", "ping/g-0", "resolved"},
		{"own peer", "a-0", "ping", "ping/a-1/loss", "firing"},
		{"gateway", "a-1", "ping", "ping/gw/loss", "pending"},
		{"clock", "a-1", "ping", "ping/clock/offset", "firing"},
		{"not ping", "a-0", "tcp_reset", "tcp_reset/sent", "resolved"},
		{"globex's own", "g-0", "ping", "ping/a-0/loss", "firing"},
	} {
		var id int64
		if err := f.st.Pool().QueryRow(ctx, `INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, node_id, node, metric, child,
				state, since, last_ts, resolved_at)
			VALUES ($1, 1, 'ping_loss', 'node', 'critical', $2, $3, $4, $5, $6, $7, $7, CASE WHEN $6 = 'resolved' THEN now() END) RETURNING id`,
			fmt.Sprintf("fp%d", i), nodeID[a.node], a.node, a.metric, a.child, a.state, now).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[a.key] = id
	}
	staff := access.Principal{Name: "test", Role: access.RoleViewer, Via: access.ViaSystem}
	acme := access.Principal{Name: "acme", Role: access.RoleCustomer, Selector: access.Selector{"customer": "acme"}}
	globex := access.Principal{Name: "globex", Role: access.RoleCustomer, Selector: access.Selector{"customer": "globex"}}

	for _, c := range []struct {
		name   string
		viewer access.Principal
		want   []string
	}{
		{"acme", acme, []string{"own peer", "gateway", "clock", "not ping"}},
		// g-0 pinged a-0 once: globex must not read acme's node's name either.
		{"globex", globex, nil},
		{"staff", staff, []string{"foreign child", "foreign metric", "foreign resolved", "own peer", "gateway", "clock", "not ping", "globex's own"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pg, err := p.listAlerts(ctx, alertFilter{Viewer: c.viewer, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, i := range pg.Alerts {
				got = append(got, i.ID)
			}
			var want []int64
			for _, k := range c.want {
				want = append(want, ids[k])
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("list: alerts %v, want %v (%q)", got, want, c.want)
			}
			for key, id := range ids {
				_, ok, err := p.alertByID(ctx, id, c.viewer)
				if err != nil {
					t.Fatal(err)
				}
				if ok != slices.Contains(c.want, key) {
					t.Errorf("detail of %q: found %v, want %v", key, ok, !ok)
				}
			}
			tt, err := p.alertTotals(ctx, alertFilter{Viewer: c.viewer})
			if err != nil {
				t.Fatal(err)
			}
			var firing, pending, resolved int
			for _, i := range pg.Alerts {
				switch i.State {
				case Firing:
					firing++
				case Pending:
					pending++
				case Resolved:
					resolved++
				}
			}
			if tt.Firing != firing || tt.Pending != pending || tt.Resolved != resolved {
				t.Errorf("totals %+v, the list has %d firing, %d pending, %d resolved", tt, firing, pending, resolved)
			}
			groups, _, err := p.alertGroups(ctx, alertFilter{State: "open", Viewer: c.viewer}, 100)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, g := range groups {
				n += g.Count
			}
			if n != firing+pending {
				t.Errorf("groups count %d open alerts, the list %d", n, firing+pending)
			}
		})
	}
}
