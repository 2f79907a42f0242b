package alert

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// The queries the alerts API needs: filters, order, limit, one by id, and
// the rules notification that reaches the leader.
func TestAlertRepoQueries(t *testing.T) {
	f := newFixture(t, pgcluster.Database(t))
	ctx := context.Background()
	p := repo{f.st.Pool()}
	now := time.Now()
	rows := []struct {
		node, rule, state, severity string
	}{
		{"web-1", "NBSRootCritical", "resolved", "critical"},
		{"web-1", "NBSRootCritical", "firing", "critical"},
		{"web-2", "NBSRootCritical", "pending", "critical"},
		{"web-2", "AcmeWarn", "resolved", "warning"},
		{"web-3", "AcmeWarn", "firing", "warning"},
		{"web-4", "AcmeInfo", "firing", "info"},
		{"web-5", "AcmePage", "pending", "page"},
	}
	for i, r := range rows {
		if _, err := f.st.Pool().Exec(ctx, `INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, node, state, since, last_ts)
			VALUES ($1, 1, $2, 'node', $5, $3, $4, $6, $6)`, fmt.Sprintf("fp%d", i), r.rule, r.node, r.state, r.severity, now); err != nil {
			t.Fatal(err)
		}
	}
	staff := access.Principal{Name: "test", Role: access.RoleViewer, Via: access.ViaSystem}
	describe := func(insts []storedInstance) string {
		out := ""
		for _, i := range insts {
			out += fmt.Sprintf("%s/%s/%s ", i.Node, i.RuleName, i.State)
		}
		return out
	}
	// Firing before pending before resolved; crit (and page) before warn
	// before the rest; history newest first whatever its severity.
	cases := []struct {
		f    alertFilter
		want string
	}{
		{alertFilter{Limit: 100}, "web-1/NBSRootCritical/firing web-3/AcmeWarn/firing web-4/AcmeInfo/firing " +
			"web-5/AcmePage/pending web-2/NBSRootCritical/pending web-2/AcmeWarn/resolved web-1/NBSRootCritical/resolved "},
		{alertFilter{State: "open", Limit: 100}, "web-1/NBSRootCritical/firing web-3/AcmeWarn/firing web-4/AcmeInfo/firing " +
			"web-5/AcmePage/pending web-2/NBSRootCritical/pending "},
		{alertFilter{State: "resolved", Node: "web-1", Limit: 100}, "web-1/NBSRootCritical/resolved "},
		{alertFilter{State: "all", Rule: "AcmeWarn", Limit: 100}, "web-3/AcmeWarn/firing web-2/AcmeWarn/resolved "},
		{alertFilter{Limit: 1}, "web-1/NBSRootCritical/firing "},
		{alertFilter{State: "firing", Node: "web-2", Limit: 100}, ""},
	}
	for _, c := range cases {
		c.f.Viewer = staff
		got, err := p.listAlerts(ctx, c.f)
		if err != nil || describe(got.Alerts) != c.want {
			t.Errorf("listAlerts(%+v) = %q, %v; want %q", c.f, describe(got.Alerts), err, c.want)
		}
	}
	if _, err := p.listAlerts(ctx, alertFilter{State: "burning", Limit: 1}); err == nil {
		t.Error("listAlerts with state burning: no error")
	}
	all, _ := p.listAlerts(ctx, alertFilter{Limit: 100, Viewer: staff})
	if got, ok, err := p.alertByID(ctx, all.Alerts[0].ID, staff); err != nil || !ok || got.Fingerprint != all.Alerts[0].Fingerprint {
		t.Errorf("alertByID(%d) = %+v, %v, %v", all.Alerts[0].ID, got, ok, err)
	}
	if _, ok, err := p.alertByID(ctx, 1_000_000, staff); err != nil || ok {
		t.Errorf("alertByID(unknown) = %v, %v; want not found", ok, err)
	}

	conn, err := pgx.Connect(ctx, f.st.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+rulesChannel); err != nil {
		t.Fatal(err)
	}
	if err := p.notifyRulesChanged(ctx); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := conn.WaitForNotification(waitCtx); err != nil || n.Channel != rulesChannel {
		t.Errorf("rules notification: %+v, %v", n, err)
	}
}
