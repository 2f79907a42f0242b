package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
)

// repo is the alert tables.
type repo struct{ pool *pgxpool.Pool }

const ruleColumns = `id, name, kind, metric, state, for_intervals, for_seconds, severity, selector, min_nodes,
	min_percent, group_by, labels, runbook_url, enabled, builtin, created_at, updated_at`

func scanRule(row pgx.Row) (Rule, error) {
	var r Rule
	var id int32
	var sel, labels []byte
	if err := row.Scan(&id, &r.Name, &r.Kind, &r.Metric, &r.State, &r.ForIntervals, &r.ForSeconds, &r.Severity, &sel,
		&r.MinNodes, &r.MinPercent, &r.GroupBy, &labels, &r.RunbookURL, &r.Enabled, &r.Builtin, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return r, err
	}
	r.ID = int64(id)
	if err := json.Unmarshal(sel, &r.Selector); err != nil {
		return r, fmt.Errorf("decode selector of rule %d: %w", r.ID, err)
	}
	if err := json.Unmarshal(labels, &r.Labels); err != nil {
		return r, fmt.Errorf("decode labels of rule %d: %w", r.ID, err)
	}
	if len(r.GroupBy) == 0 {
		r.GroupBy = nil
	}
	return r, nil
}

func (p repo) rules(ctx context.Context) ([]Rule, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+ruleColumns+` FROM alert_rules ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list alert rules: %w", err)
	}
	rules, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Rule, error) { return scanRule(r) })
	if err != nil {
		return nil, fmt.Errorf("list alert rules: %w", err)
	}
	return rules, nil
}

func (p repo) rule(ctx context.Context, id int64) (Rule, error) {
	r, err := scanRule(p.pool.QueryRow(ctx, `SELECT `+ruleColumns+` FROM alert_rules WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errkind.Errorf(errkind.NotFound, "alert rule %d: not found", id)
	}
	if err != nil {
		return r, fmt.Errorf("read alert rule %d: %w", id, err)
	}
	return r, nil
}

func ruleArgs(r Rule) ([]any, error) {
	sel, err := json.Marshal(nonNil(r.Selector))
	if err != nil {
		return nil, fmt.Errorf("encode selector: %w", err)
	}
	labels, err := json.Marshal(nonNil(r.Labels))
	if err != nil {
		return nil, fmt.Errorf("encode labels: %w", err)
	}
	groupBy := r.GroupBy
	if groupBy == nil {
		groupBy = []string{}
	}
	return []any{r.Name, r.Kind, r.Metric, r.State, r.ForIntervals, r.ForSeconds, r.Severity, sel, r.MinNodes,
		r.MinPercent, groupBy, labels, r.RunbookURL, r.Enabled}, nil
}

// conflict turns a duplicate name into a Conflict the user can act on.
func conflict(err error, name string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return errkind.Errorf(errkind.Conflict, "an alert rule named %q exists already", name)
	}
	return err
}

// createRule, updateRule and deleteRule write the change and its audit
// entry (with the rule before and after) in one transaction.
func (p repo) createRule(ctx context.Context, r Rule) (Rule, error) {
	args, err := ruleArgs(r)
	if err != nil {
		return r, err
	}
	var out Rule
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		out, err = scanRule(tx.QueryRow(ctx, `
			INSERT INTO alert_rules (name, kind, metric, state, for_intervals, for_seconds, severity, selector, min_nodes,
				min_percent, group_by, labels, runbook_url, enabled)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
			RETURNING `+ruleColumns, args...))
		if err != nil {
			return err
		}
		return access.Audit(ctx, tx, access.Entry{Action: "create", ObjectKind: "alert_rule", ObjectID: strconv.FormatInt(out.ID, 10), New: out})
	})
	if err != nil {
		return r, fmt.Errorf("create alert rule: %w", conflict(err, r.Name))
	}
	return out, nil
}

func (p repo) updateRule(ctx context.Context, id int64, r Rule) (Rule, error) {
	args, err := ruleArgs(r)
	if err != nil {
		return r, err
	}
	var out Rule
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		old, err := scanRule(tx.QueryRow(ctx, `SELECT `+ruleColumns+` FROM alert_rules WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		out, err = scanRule(tx.QueryRow(ctx, `
			UPDATE alert_rules SET name = $1, kind = $2, metric = $3, state = $4, for_intervals = $5, for_seconds = $6,
				severity = $7, selector = $8, min_nodes = $9, min_percent = $10, group_by = $11, labels = $12,
				runbook_url = $13, enabled = $14, updated_at = now()
			WHERE id = $15 RETURNING `+ruleColumns, append(args, id)...))
		if err != nil {
			return err
		}
		return access.Audit(ctx, tx, access.Entry{Action: "update", ObjectKind: "alert_rule", ObjectID: strconv.FormatInt(id, 10), Old: old, New: out})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errkind.Errorf(errkind.NotFound, "alert rule %d: not found", id)
	}
	if err != nil {
		return r, fmt.Errorf("update alert rule %d: %w", id, conflict(err, r.Name))
	}
	return out, nil
}

func (p repo) deleteRule(ctx context.Context, id int64) (found bool, err error) {
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		old, err := scanRule(tx.QueryRow(ctx, `DELETE FROM alert_rules WHERE id = $1 RETURNING `+ruleColumns, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return access.Audit(ctx, tx, access.Entry{Action: "delete", ObjectKind: "alert_rule", ObjectID: strconv.FormatInt(id, 10), Old: old})
	})
	if err != nil {
		return false, fmt.Errorf("delete alert rule %d: %w", id, err)
	}
	return found, nil
}

const instanceColumns = `id, fingerprint, rule_id, rule_name, kind, severity, coalesce(node_id, 0), node, metric, child,
	group_key, state, since, last_ts, fired_at, resolved_at, value, labels, annotations`

// storedInstance is an instance row.
type storedInstance struct {
	Instance
}

func scanInstance(row pgx.Row) (storedInstance, error) {
	var s storedInstance
	var group, labels, annotations []byte
	var fired, resolved *time.Time
	var ruleID int32
	if err := row.Scan(&s.ID, &s.Fingerprint, &ruleID, &s.RuleName, &s.Kind, &s.Severity, &s.NodeID, &s.Node, &s.Metric,
		&s.Child, &group, &s.State, &s.Since, &s.LastTS, &fired, &resolved, &s.Headline, &labels, &annotations); err != nil {
		return s, err
	}
	s.RuleID = int64(ruleID)
	if fired != nil {
		s.FiredAt = *fired
	}
	if resolved != nil {
		s.ResolvedAt = *resolved
	}
	for _, j := range []struct {
		raw []byte
		dst *map[string]string
	}{{group, &s.Group}, {labels, &s.Labels}, {annotations, &s.Annotations}} {
		if err := json.Unmarshal(j.raw, j.dst); err != nil {
			return s, fmt.Errorf("decode alert %d: %w", s.ID, err)
		}
	}
	return s, nil
}

func (p repo) instances(ctx context.Context, where string, args ...any) ([]storedInstance, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+instanceColumns+` FROM alert_instances `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedInstance, error) { return scanInstance(r) })
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	return out, nil
}

func (p repo) watermarks(ctx context.Context) (map[int32]time.Time, error) {
	rows, err := p.pool.Query(ctx, `SELECT node_id, ts FROM alert_watermarks`)
	if err != nil {
		return nil, fmt.Errorf("read alert watermarks: %w", err)
	}
	defer rows.Close()
	out := map[int32]time.Time{}
	for rows.Next() {
		var id int32
		var ts time.Time
		if err := rows.Scan(&id, &ts); err != nil {
			return nil, fmt.Errorf("read alert watermarks: %w", err)
		}
		out[id] = ts
	}
	return out, rows.Err()
}

// Leader is who evaluates alerts, as recorded by the leader itself.
type Leader struct {
	Holder    string    `json:"holder"`
	Epoch     int64     `json:"epoch"`
	Since     time.Time `json:"since"`
	Heartbeat time.Time `json:"heartbeat"`
}

func (p repo) leader(ctx context.Context) (Leader, error) {
	var l Leader
	err := p.pool.QueryRow(ctx, `SELECT holder, epoch, since, heartbeat FROM alert_leader WHERE id = 1`).
		Scan(&l.Holder, &l.Epoch, &l.Since, &l.Heartbeat)
	if err != nil {
		return l, fmt.Errorf("read alert leader: %w", err)
	}
	return l, nil
}

// Delivery is one entry of the delivery log.
type Delivery struct {
	ID          int64      `json:"id"`
	Target      string     `json:"target"`
	URL         string     `json:"url"`
	Event       string     `json:"event"`
	Status      string     `json:"status"`
	Attempts    int        `json:"attempts"`
	LastError   string     `json:"last_error,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	DeliveredAt *time.Time `json:"delivered_at"`
}

func (p repo) deliveries(ctx context.Context, instance int64) ([]Delivery, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, target, url, event, status, attempts, last_error, created_at, delivered_at
		FROM alert_deliveries WHERE instance_id = $1 ORDER BY id`, instance)
	if err != nil {
		return nil, fmt.Errorf("read deliveries of alert %d: %w", instance, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Delivery])
	if err != nil {
		return nil, fmt.Errorf("read deliveries of alert %d: %w", instance, err)
	}
	return out, nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
