package access

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestAudit(t *testing.T) {
	pool := testPool(t)
	a, _ := newTestAccess(t, pool, Config{})
	op := Principal{Name: "ops", Role: RoleOperator, Via: ViaSession, TokenID: 7}
	ctx := withRemote(WithPrincipal(context.Background(), op), "192.0.2.4:5555")
	type threshold struct {
		Warn float64 `json:"warn"`
		Crit float64 `json:"crit"`
	}

	// An entry commits or rolls back with its change.
	errAbort := errors.New("abort")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := Audit(ctx, tx, Entry{Action: "update", ObjectKind: "threshold", ObjectID: "1"}); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatal(err)
	}
	if log, err := a.AuditLog(ctx, AuditQuery{}); err != nil || len(log) != 0 {
		t.Fatalf("a rolled back entry is in the log: %+v %v", log, err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return Audit(ctx, tx, Entry{Action: "update", ObjectKind: "threshold", ObjectID: "global:latency",
			Old: threshold{1, 2}, New: threshold{3, 4}})
	})
	if err != nil {
		t.Fatal(err)
	}
	log, err := a.AuditLog(ctx, AuditQuery{})
	if err != nil || len(log) != 1 {
		t.Fatalf("log %+v %v", log, err)
	}
	e := log[0]
	if e.Actor != "ops" || e.ActorKind != "session" || e.Role != "operator" || e.TokenID == nil || *e.TokenID != 7 ||
		e.Action != "update" || e.ObjectKind != "threshold" || e.ObjectID != "global:latency" || e.RemoteAddr != "192.0.2.4:5555" ||
		time.Since(e.At) > time.Minute {
		t.Errorf("entry %+v", e)
	}
	var oldV, newV threshold
	if json.Unmarshal(e.Old, &oldV) != nil || json.Unmarshal(e.New, &newV) != nil || oldV != (threshold{1, 2}) || newV != (threshold{3, 4}) {
		t.Errorf("old %s new %s", e.Old, e.New)
	}

	// Without a caller the collector itself acted; a huge value is
	// replaced by a note; nothing before a create is SQL NULL.
	huge := strings.Repeat("x", maxAuditValue)
	if err := Audit(context.Background(), pool, Entry{Action: "delete", ObjectKind: "node", ObjectID: "n1", Old: huge}); err != nil {
		t.Fatal(err)
	}
	if err := Audit(ctx, pool, Entry{Action: "create", ObjectKind: "alert_rule", ObjectID: "9", New: map[string]any{"name": "r"}}); err != nil {
		t.Fatal(err)
	}
	nodes, err := a.AuditLog(ctx, AuditQuery{ObjectKind: "node"})
	if err != nil || len(nodes) != 1 {
		t.Fatalf("node entries %+v %v", nodes, err)
	}
	if n := nodes[0]; n.Actor != "collector" || n.ActorKind != "system" || n.Role != "" || n.TokenID != nil ||
		!strings.Contains(string(n.Old), `"truncated": true`) || n.New != nil {
		t.Errorf("system entry %+v old %s", n, n.Old)
	}
	var nulls int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE object_kind = 'alert_rule' AND old_value IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
		t.Errorf("create's old value: %d NULL rows (%v)", nulls, err)
	}

	for _, bad := range []Entry{
		{ObjectKind: "node"},
		{Action: "x"},
		{Action: "x", ObjectKind: "node", ObjectID: strings.Repeat("i", 257)},
		{Action: "x", ObjectKind: "node", New: func() {}},
	} {
		if err := Audit(ctx, pool, bad); err == nil {
			t.Errorf("Audit(%+v) accepted", bad)
		}
	}

	// Filters, order and limits.
	all, err := a.AuditLog(ctx, AuditQuery{})
	if err != nil || len(all) != 3 || all[0].ObjectKind != "alert_rule" || all[2].ObjectKind != "threshold" {
		t.Fatalf("newest first: %+v %v", all, err)
	}
	page, err := a.AuditLog(ctx, AuditQuery{Limit: 1, BeforeID: all[0].ID})
	if err != nil || len(page) != 1 || page[0].ID != all[1].ID {
		t.Errorf("paging: %+v %v", page, err)
	}
	if got, err := a.AuditLog(ctx, AuditQuery{ObjectKind: "alert_rule", ObjectID: "9"}); err != nil || len(got) != 1 {
		t.Errorf("by object: %+v %v", got, err)
	}
	if got, err := a.AuditLog(ctx, AuditQuery{Since: time.Now().Add(time.Hour)}); err != nil || len(got) != 0 {
		t.Errorf("since the future: %+v %v", got, err)
	}
	if got, err := a.AuditLog(ctx, AuditQuery{Until: time.Now().Add(-time.Hour)}); err != nil || len(got) != 0 {
		t.Errorf("until an hour ago: %+v %v", got, err)
	}
	if got, err := a.AuditLog(ctx, AuditQuery{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}); err != nil || len(got) != 3 {
		t.Errorf("this hour: %d entries, %v", len(got), err)
	}
	for _, q := range []AuditQuery{
		{Limit: MaxAuditLimit + 1},
		{Limit: -1},
		{ObjectKind: strings.Repeat("k", 300)},
		{Since: time.Now(), Until: time.Now().Add(-time.Second)},
	} {
		if _, err := a.AuditLog(ctx, q); !errors.Is(err, ErrInvalid) {
			t.Errorf("AuditLog(%+v): %v", q, err)
		}
	}
}
