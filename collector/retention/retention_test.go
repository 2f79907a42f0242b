package retention

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// One pass at a given time removes what each retention says and nothing
// else: a silent node with its data, resolved alerts (but one whose
// resolve is still to be delivered, and open ones), old audit entries.
func TestPassKeepsEachRetention(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, pgcluster.Database(t), log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	day := 24 * time.Hour
	for _, n := range []struct {
		name string
		at   time.Time
	}{{"ret-gone", now.Add(-10 * day)}, {"ret-live", now.Add(-time.Hour)}} {
		id, err := st.UpsertNode(ctx, store.Node{Name: n.name, InstanceID: 1, IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{{Path: "r", Title: "r", Unit: "1", Kind: store.KindRate}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, InstanceID: 1, Seq: 1, Time: n.at, IntervalMS: 1000,
			Samples: []store.Sample{{MetricID: ids["r"], Path: "r", Value: 1, State: store.StateOK}}}}); err != nil {
			t.Fatal(err)
		}
	}
	pool := st.Pool()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []struct {
		fp, state string
		resolved  *time.Time
		pending   bool // its resolve is still to be delivered
	}{
		{"old", "resolved", ptr(now.Add(-40 * day)), false},
		{"old-undelivered", "resolved", ptr(now.Add(-40 * day)), true},
		{"recent", "resolved", ptr(now.Add(-day)), false},
		{"firing", "firing", nil, false},
	} {
		var id int64
		if err := pool.QueryRow(ctx, `INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, state, since, last_ts, resolved_at)
			VALUES ($1, 1, 'r', 'node', 'critical', $2, $3, $3, $4) RETURNING id`, a.fp, a.state, now.Add(-50*day), a.resolved).Scan(&id); err != nil {
			t.Fatal(err)
		}
		status := "delivered"
		if a.pending {
			status = "pending"
		}
		exec(`INSERT INTO alert_deliveries (instance_id, target, url, event, status, payload) VALUES ($1, 'webhook', 'http://127.0.0.1:9/', 'resolved', $2, '{}')`, id, status)
	}
	for _, at := range []time.Time{now.Add(-500 * day), now.Add(-day)} {
		exec(`INSERT INTO audit_log (at, actor, actor_kind, role, action, object_kind, object_id) VALUES ($1, 'a', 'token', 'admin', 'update', 'threshold', 'x')`, at)
	}

	r := New(st, nodeauth.NewAdmin(st, nil, "", "", log), Config{Raw: 5 * day, Rollup1m: 5 * day, Rollup1h: 5 * day,
		Nodes: 7 * day, Alerts: 30 * day, Audit: 400 * day}, log)
	s, err := r.Pass(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if s.ExpiredNodes != 1 || s.Alerts != 1 || s.AuditEntries != 1 {
		t.Errorf("pass: %+v; want 1 node, 1 alert, 1 audit entry", s)
	}
	names := func(q string) []string {
		t.Helper()
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := names(`SELECT name FROM nodes ORDER BY name`); !slices.Equal(got, []string{"ret-live"}) {
		t.Errorf("nodes = %v, want ret-live", got)
	}
	if got := names(`SELECT fingerprint FROM alert_instances ORDER BY fingerprint`); !slices.Equal(got, []string{"firing", "old-undelivered", "recent"}) {
		t.Errorf("alerts = %v", got)
	}
	if got := names(`SELECT fingerprint FROM alert_instances i JOIN alert_deliveries d ON d.instance_id = i.id ORDER BY 1`); !slices.Equal(got, []string{"firing", "old-undelivered", "recent"}) {
		t.Errorf("deliveries of = %v", got)
	}
	// The expiry is in the audit log, and the old entry is gone.
	if got := names(`SELECT action || ' ' || object_id FROM audit_log ORDER BY at`); !slices.Equal(got, []string{"update x", "expire ret-gone"}) {
		t.Errorf("audit log = %v", got)
	}
	// A second pass finds nothing more.
	if s, err := r.Pass(ctx, now); err != nil || s.ExpiredNodes+int(s.Alerts+s.AuditEntries+s.Definitions) != 0 {
		t.Errorf("second pass: %+v, %v", s, err)
	}
}

func ptr[T any](v T) *T { return &v }

// A node that registered hours ago and never reported leaves within
// --retention.unreported-nodes, keeping its credential and bound labels;
// one that reported, one registered recently, and one with another
// tenant's row (moved while away) stay.
func TestPassExpiresUnreportedNodes(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, pgcluster.Database(t), log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pool := st.Pool()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	for _, n := range []struct {
		name     string
		hello    time.Duration // ago
		reported bool
	}{{"unrep-old", 7 * time.Hour, false}, {"unrep-new", time.Hour, false}, {"rep-old", 7 * time.Hour, true}, {"unrep-moved", 7 * time.Hour, false}} {
		id, err := st.UpsertNode(ctx, store.Node{Name: n.name, InstanceID: 1, IntervalMS: 1000, Labels: map[string]string{"customer": "acme"}, Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if n.reported {
			ids, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{{Path: "r", Title: "r", Unit: "1", Kind: store.KindRate}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, InstanceID: 1, Seq: 1, Time: now.Add(-n.hello), IntervalMS: 1000,
				Samples: []store.Sample{{MetricID: ids["r"], Path: "r", Value: 1, State: store.StateOK}}}}); err != nil {
				t.Fatal(err)
			}
		}
		if n.name == "unrep-moved" {
			if _, err := st.Rebind(ctx, n.name, map[string]string{"customer": "globex"}, []string{}, "globex"); err != nil {
				t.Fatal(err)
			}
		}
		exec(`UPDATE nodes SET last_hello = $2 WHERE name = $1`, n.name, now.Add(-n.hello))
	}
	exec(`INSERT INTO node_credentials (node, state, secret_hash, enrolled_by, enrolled_at) VALUES ('unrep-old', 'active', sha256('x'), 'bootstrap:acme', $1)`, now.Add(-8*time.Hour))
	exec(`INSERT INTO node_bindings (node, labels, set_by) VALUES ('unrep-old', '{"customer":"acme"}', 'bootstrap:acme')`)

	day := 24 * time.Hour
	r := New(st, nodeauth.NewAdmin(st, nil, "", "", log), Config{Raw: 5 * day, Rollup1m: 5 * day, Rollup1h: 5 * day,
		Nodes: 7 * day, Unreported: 6 * time.Hour, Alerts: 30 * day, Audit: 400 * day}, log)
	s, err := r.Pass(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if s.UnreportedNodes != 1 || s.ExpiredNodes != 0 {
		t.Errorf("pass: %+v; want 1 unreported node", s)
	}
	var left []string
	rows, _ := pool.Query(ctx, `SELECT DISTINCT name FROM nodes ORDER BY name`)
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"rep-old", "unrep-moved", "unrep-new"}) {
		t.Errorf("nodes = %v, want rep-old, unrep-moved, unrep-new", left)
	}
	var creds, bindings, audited int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM node_credentials WHERE node = 'unrep-old'),
		(SELECT count(*) FROM node_bindings WHERE node = 'unrep-old'),
		(SELECT count(*) FROM audit_log WHERE action = 'expire_unreported' AND object_id = 'unrep-old')`).Scan(&creds, &bindings, &audited); err != nil {
		t.Fatal(err)
	}
	if creds != 1 || bindings != 1 || audited != 1 {
		t.Errorf("unrep-old: %d credentials, %d bindings, %d audit entries; want its credential and binding kept, the expiry audited", creds, bindings, audited)
	}
}
