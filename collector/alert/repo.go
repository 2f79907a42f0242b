package alert

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/leader"
	"github.com/nbs-project/nbs/collector/store"
)

// repo is the alert tables and notification channels: all of alerting's
// SQL. What belongs to the store (reports, nodes, metric paths) is read
// through the store's methods.
type repo struct{ pool *pgxpool.Pool }

const (
	// leaderTable is the term record of the alert leader's election.
	leaderTable = "alert_leader"
	// wakeChannel carries "these nodes have new reports" from every
	// collector to the leader; rulesChannel says the rules changed.
	wakeChannel  = "nbs_alert_wake"
	rulesChannel = "nbs_alert_rules"
)

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
	group_key, state, since, last_ts, fired_at, resolved_at, value, labels, annotations,
	acknowledged_at, acknowledged_by, ack_comment, sil.silence_id, sil.silenced_until, coalesce(sil.silenced_by, ''),
	coalesce(sil.silence_comment, '')`

// instanceFrom is the instances with the newest-ending active silence of
// each one's identity.
const instanceFrom = ` FROM alert_instances` + instanceJoin

// instanceJoin joins what alert_instances names (the table, or a page of it
// under that name) with its newest-ending active silence.
const instanceJoin = ` LEFT JOIN LATERAL (
	SELECT s.id AS silence_id, s.ends_at AS silenced_until, s.created_by AS silenced_by, s.comment AS silence_comment
	FROM alert_silences s WHERE s.fingerprint = alert_instances.fingerprint AND s.ends_at > now()
	ORDER BY s.ends_at DESC LIMIT 1) sil ON true `

// storedInstance is an instance row: the engine's instance and what people
// did about it.
type storedInstance struct {
	Instance
	AckAt          *time.Time
	AckBy          string
	AckComment     string
	SilenceID      *int64
	SilencedUntil  *time.Time
	SilencedBy     string
	SilenceComment string
}

// scanInstance reads instanceColumns and then into extra, if any.
func scanInstance(row pgx.Row, extra ...any) (storedInstance, error) {
	var s storedInstance
	var group, labels, annotations []byte
	var fired, resolved *time.Time
	var ruleID int32
	dest := append(make([]any, 0, 26+len(extra)), &s.ID, &s.Fingerprint, &ruleID, &s.RuleName, &s.Kind, &s.Severity, &s.NodeID, &s.Node, &s.Metric,
		&s.Child, &group, &s.State, &s.Since, &s.LastTS, &fired, &resolved, &s.Headline, &labels, &annotations,
		&s.AckAt, &s.AckBy, &s.AckComment, &s.SilenceID, &s.SilencedUntil, &s.SilencedBy, &s.SilenceComment)
	if err := row.Scan(append(dest, extra...)...); err != nil {
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
	rows, err := p.pool.Query(ctx, `SELECT `+instanceColumns+instanceFrom+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedInstance, error) { return scanInstance(r) })
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	return out, nil
}

// alertFilter selects alerts as GET /alerts asks for them.
type alertFilter struct {
	State string // "" or "all", "open", or a Phase
	Node  string
	Rule  string
	Limit int
	// After is where the previous page ended; nil for the first page.
	After *alertCursor
	// Viewer is who asks: a customer sees only node alerts of its own
	// nodes (a group alert counts nodes across tenants).
	Viewer access.Principal
}

// The order of the alerts API, for on-call: firing before pending before
// resolved; within the open ones the worst severity first (as the UI's
// severityState reads severities: crit… and page… before warn… before the
// rest); then the newest first. History (resolved) is newest first only.
// The two ranks and the id are the cursor: a page continues strictly after
// the previous page's last alert, so alerts opened while a client pages
// neither shift what it has not read yet nor come back twice.
const (
	stateRankSQL = `CASE state WHEN 'firing' THEN 0 WHEN 'pending' THEN 1 ELSE 2 END`
	sevRankSQL   = `CASE WHEN state = 'resolved' THEN 0 WHEN severity LIKE 'crit%' OR severity LIKE 'page%' THEN 0
		WHEN severity LIKE 'warn%' THEN 1 ELSE 2 END`
	maxStateRank = 2
	maxSevRank   = 2
	// rankedOrder is the order over a relation with srank and vrank.
	rankedOrder = ` ORDER BY srank, vrank, id DESC`
)

// alertCursor is the place of an alert in that order.
type alertCursor struct {
	StateRank, SevRank int
	ID                 int64
}

const cursorFormat = "a1.%d.%d.%d"

// String is the cursor as clients carry it: opaque, so the order's keys
// can change without breaking a contract.
func (c alertCursor) String() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, cursorFormat, c.StateRank, c.SevRank, c.ID))
}

// parseAlertCursor reads a cursor a client gives back; anything but one
// this API wrote is an error.
func parseAlertCursor(s string) (alertCursor, error) {
	var c alertCursor
	bad := errors.New("not a cursor this API gave (pass next_cursor of the previous page as it is)")
	if len(s) > 64 {
		return c, bad
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return c, bad
	}
	if _, err := fmt.Sscanf(string(raw), cursorFormat, &c.StateRank, &c.SevRank, &c.ID); err != nil ||
		string(raw) != fmt.Sprintf(cursorFormat, c.StateRank, c.SevRank, c.ID) ||
		c.StateRank < 0 || c.StateRank > maxStateRank || c.SevRank < 0 || c.SevRank > maxSevRank || c.ID < 1 ||
		c.String() != s { // the decoder skips newlines: only the one spelling String writes
		return c, bad
	}
	return c, nil
}

// AlertTotals counts alerts by state whatever page was asked for: what the
// header and the page say when a page shows only some. Acknowledged and
// Silenced count open alerts (a resolved one needs neither).
type AlertTotals struct {
	Firing       int `json:"firing"`
	Pending      int `json:"pending"`
	Resolved     int `json:"resolved"`
	Acknowledged int `json:"acknowledged"`
	Silenced     int `json:"silenced"`
}

// of is how many alerts a state filter selects.
func (t AlertTotals) of(state string) int {
	switch state {
	case "open":
		return t.Firing + t.Pending
	case string(Firing):
		return t.Firing
	case string(Pending):
		return t.Pending
	case string(Resolved):
		return t.Resolved
	}
	return t.Firing + t.Pending + t.Resolved
}

// alertPage is one page of alerts and where the next one starts (nil: this
// is the last page).
type alertPage struct {
	Alerts []storedInstance
	Next   *alertCursor
}

// alertWhere is the filter's WHERE clause but its state: node, rule and
// what the viewer may see.
func alertWhere(f alertFilter, args *[]any) string {
	arg := func(v any) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args))
	}
	where := ` WHERE true`
	if f.Node != "" {
		where += ` AND node = ` + arg(f.Node)
	}
	if f.Rule != "" {
		where += ` AND rule_name = ` + arg(f.Rule)
	}
	return where + visibleTo(f.Viewer, args)
}

func stateWhere(state string, args *[]any) (string, error) {
	switch state {
	case "", "all":
		return "", nil
	case "open":
		return ` AND state <> 'resolved'`, nil
	case string(Pending), string(Firing), string(Resolved):
		*args = append(*args, state)
		return ` AND state = $` + strconv.Itoa(len(*args)), nil
	}
	return "", fmt.Errorf("alert state %q must be firing, pending, resolved, open or all", state)
}

// ranked is the filtered instances with their ranks in the API's order.
func ranked(f alertFilter, args *[]any) (string, error) {
	where := alertWhere(f, args)
	st, err := stateWhere(f.State, args)
	if err != nil {
		return "", err
	}
	return `(SELECT id, rule_name, group_key, state, ` + stateRankSQL + ` AS srank, ` + sevRankSQL + ` AS vrank
		FROM alert_instances` + where + st + `) ranked`, nil
}

// listAlerts returns a page of alerts in the API's order (stateRankSQL).
func (p repo) listAlerts(ctx context.Context, f alertFilter) (alertPage, error) {
	var args []any
	from, err := ranked(f, &args)
	if err != nil {
		return alertPage{}, err
	}
	after := ""
	if c := f.After; c != nil {
		args = append(args, c.StateRank, c.SevRank, -c.ID)
		n := len(args)
		after = fmt.Sprintf(` WHERE (srank, vrank, -id) > ($%d, $%d, $%d)`, n-2, n-1, n)
	}
	args = append(args, f.Limit+1)
	// The page is chosen by id and ranks alone (a sort of narrow rows); only
	// its rows are read whole and joined with their silences.
	page := `(SELECT i.*, p.srank, p.vrank FROM (SELECT id, srank, vrank FROM ` + from + after + rankedOrder + ` LIMIT $` +
		strconv.Itoa(len(args)) + `) p JOIN alert_instances i USING (id)) alert_instances`
	rows, err := p.pool.Query(ctx, `SELECT `+instanceColumns+`, srank, vrank FROM `+page+instanceJoin+rankedOrder, args...)
	if err != nil {
		return alertPage{}, fmt.Errorf("list alerts: %w", err)
	}
	var out alertPage
	var keys []alertCursor
	for rows.Next() {
		var k alertCursor
		inst, err := scanInstance(rows, &k.StateRank, &k.SevRank)
		if err != nil {
			rows.Close()
			return alertPage{}, fmt.Errorf("list alerts: %w", err)
		}
		k.ID = inst.ID
		out.Alerts, keys = append(out.Alerts, inst), append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return alertPage{}, fmt.Errorf("list alerts: %w", err)
	}
	if len(out.Alerts) > f.Limit {
		out.Alerts = out.Alerts[:f.Limit]
		out.Next = &keys[f.Limit-1]
	}
	return out, nil
}

// alertTotals counts the alerts the filter's node, rule and viewer select,
// by state (whatever state the filter asks for).
func (p repo) alertTotals(ctx context.Context, f alertFilter) (AlertTotals, error) {
	var args []any
	where := alertWhere(f, &args)
	var t AlertTotals
	err := p.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'firing'), count(*) FILTER (WHERE state = 'pending'),
		count(*) FILTER (WHERE state = 'resolved'),
		count(*) FILTER (WHERE state <> 'resolved' AND acknowledged_at IS NOT NULL),
		count(*) FILTER (WHERE state <> 'resolved' AND EXISTS (SELECT FROM alert_silences s
			WHERE s.fingerprint = alert_instances.fingerprint AND s.ends_at > now()))
		FROM alert_instances`+where, args...).Scan(&t.Firing, &t.Pending, &t.Resolved, &t.Acknowledged, &t.Silenced)
	if err != nil {
		return t, fmt.Errorf("count alerts: %w", err)
	}
	return t, nil
}

// groupIDSpan bounds alert ids in a group's packed place (alertGroups):
// 2^40, a trillion alerts.
const groupIDSpan int64 = 1 << 40

// alertGroup is the open alerts of one rule and group labels, as
// Alertmanager groups notifications: a rack gone silent is one group of
// its nodes' node_silent alerts, not a page of them.
type alertGroup struct {
	Rule    string
	Group   map[string]string
	Count   int
	Firing  int
	Pending int
	// First is the group's first alert in the API's order: its worst.
	First storedInstance
}

// alertGroups returns the groups of the open alerts the filter selects
// (resolved ones are not grouped), worst first by their first alert, at
// most limit of them, and how many there are.
func (p repo) alertGroups(ctx context.Context, f alertFilter, limit int) ([]alertGroup, int, error) {
	if f.State == string(Resolved) {
		return nil, 0, nil
	}
	var args []any
	if f.State != string(Firing) && f.State != string(Pending) {
		f.State = "open"
	}
	from, err := ranked(f, &args)
	if err != nil {
		return nil, 0, err
	}
	args = append(args, limit)
	// A group's first alert is the least of its members' places in the
	// order, packed in one bigint (ranks above the id's 40 bits, the id
	// inverted so the newest is least): one hash aggregate, no sort of the
	// members by text and jsonb.
	rows, err := p.pool.Query(ctx, `SELECT `+strconv.FormatInt(groupIDSpan, 10)+` - min(place) % `+strconv.FormatInt(groupIDSpan, 10)+`,
			count(*), count(*) FILTER (WHERE state = 'firing'), count(*) FILTER (WHERE state = 'pending'), count(*) OVER ()
		FROM (SELECT rule_name, group_key, state, (srank * `+strconv.Itoa(maxSevRank+1)+` + vrank) * `+strconv.FormatInt(groupIDSpan, 10)+`::bigint + (`+
		strconv.FormatInt(groupIDSpan, 10)+` - id) AS place FROM `+from+`) m
		GROUP BY rule_name, group_key ORDER BY min(place) LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("group alerts: %w", err)
	}
	var groups []alertGroup
	var ids []int64
	total := 0
	for rows.Next() {
		var g alertGroup
		var id int64
		if err := rows.Scan(&id, &g.Count, &g.Firing, &g.Pending, &total); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("group alerts: %w", err)
		}
		groups, ids = append(groups, g), append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("group alerts: %w", err)
	}
	if len(ids) == 0 {
		return nil, 0, nil
	}
	firsts, err := p.instances(ctx, `WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, 0, fmt.Errorf("group alerts: %w", err)
	}
	byID := make(map[int64]storedInstance, len(firsts))
	for _, inst := range firsts {
		byID[inst.ID] = inst
	}
	out := groups[:0]
	for i, g := range groups {
		// An alert resolved and cleared between the two reads drops its group
		// from this answer; the next poll has it right.
		if inst, ok := byID[ids[i]]; ok {
			g.First, g.Rule, g.Group = inst, inst.RuleName, inst.Group
			out = append(out, g)
		}
	}
	return out, total, nil
}

// visibleTo narrows a WHERE clause to the alerts viewer may see: a
// customer only node alerts of its own nodes (a group alert counts nodes
// across tenants), none of a staff-only metric such as the agent's own
// root (api.View), and none about a ping target named after a node it does
// not see (foreignPingSQL), so that lists, details, groups and counts agree.
func visibleTo(viewer access.Principal, args *[]any) string {
	if viewer.SeesAll() {
		return ""
	}
	clause, extra := viewer.LabelClause("labels", len(*args)+1)
	*args = append(*args, extra...)
	return ` AND kind = '` + KindNode + `' AND node_id IN (SELECT id FROM nodes WHERE ` + clause + `)` +
		api.ViewFor(viewer).MetricFilter("metric") + foreignPingSQL(clause)
}

// foreignPingSQL excludes the alerts whose metric or child is under a ping
// target named after a node outside the viewer's scope (seen: its label
// clause on the nodes table's labels): the rule of store.ForeignPing, which
// the API and reports apply to trees, evidence and report rows. The
// collector refuses such targets at ingest now; alerts that fired before
// the tenancy fix (a node kept pinging a peer of its old mesh) still name
// them in their text, so the rule holds on every read instead. A target
// named like no node (an address, a gateway) stays visible, as does
// ping/clock. The names outside are one uncorrelated subquery, hashed once
// a statement: as a correlated NOT EXISTS per alert a customer's page at
// 3,000 open alerts took 93 ms instead of 6; this way a few ms more than
// without the rule.
func foreignPingSQL(seen string) string {
	target := func(col string) string {
		return `(CASE WHEN ` + col + ` LIKE 'ping/%' AND split_part(` + col + `, '/', 2) <> 'clock' THEN split_part(` + col + `, '/', 2) ELSE '' END)`
	}
	outside := `(SELECT name FROM nodes GROUP BY name HAVING NOT bool_or(` + seen + `))`
	return ` AND ` + target("metric") + ` NOT IN ` + outside + ` AND ` + target("child") + ` NOT IN ` + outside
}

// alertByID returns one alert viewer may see; ok is false when there is
// none.
func (p repo) alertByID(ctx context.Context, id int64, viewer access.Principal) (storedInstance, bool, error) {
	args := []any{id}
	insts, err := p.instances(ctx, `WHERE id = $1`+visibleTo(viewer, &args), args...)
	if err != nil || len(insts) == 0 {
		return storedInstance{}, false, err
	}
	return insts[0], true, nil
}

// openInstances are the pending and firing alerts.
func (p repo) openInstances(ctx context.Context) ([]storedInstance, error) {
	return p.instances(ctx, `WHERE state <> 'resolved'`)
}

// resolvedWithin are the alerts resolved less than d ago.
func (p repo) resolvedWithin(ctx context.Context, d time.Duration) ([]storedInstance, error) {
	return p.instances(ctx, `WHERE state = 'resolved' AND resolved_at > now() - $1::interval`, d)
}

// firingOrResolvedWithin are the firing alerts and those resolved less than d ago.
func (p repo) firingOrResolvedWithin(ctx context.Context, d time.Duration) ([]storedInstance, error) {
	return p.instances(ctx, `WHERE state = 'firing' OR (state = 'resolved' AND resolved_at > now() - $1::interval)`, d)
}

func (p repo) watermarks(ctx context.Context) (map[int32]time.Time, error) {
	rows, err := p.pool.Query(ctx, `SELECT node_id, ts FROM alert_watermarks`)
	if err != nil {
		return nil, fmt.Errorf("read alert watermarks: %w", err)
	}
	out, err := store.NodeTimes(rows)
	if err != nil {
		return nil, fmt.Errorf("read alert watermarks: %w", err)
	}
	return out, nil
}

// Leader is who evaluates alerts, as recorded by the leader itself.
type Leader = leader.Status

func (p repo) leader(ctx context.Context) (Leader, error) {
	return leader.ReadStatus(ctx, p.pool, leaderTable)
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

// notifyWake tells the leader, wherever it runs, that nodes have new
// reports: a payload from wakePayloads, or "*" for every node.
func (p repo) notifyWake(ctx context.Context, payload string) error {
	if _, err := p.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, wakeChannel, payload); err != nil {
		return fmt.Errorf("notify %s: %w", wakeChannel, err)
	}
	return nil
}

// notifyRulesChanged tells the leader, wherever it runs, to reload the
// rules; if the notification is lost it reloads within reloadEvery anyway.
func (p repo) notifyRulesChanged(ctx context.Context) error {
	if _, err := p.pool.Exec(ctx, `SELECT pg_notify($1, '')`, rulesChannel); err != nil {
		return fmt.Errorf("notify %s: %w", rulesChannel, err)
	}
	return nil
}

// outboxEntry is one notification queued with the transition it announces.
type outboxEntry struct {
	target, url string
	payload     []byte
}

// outboxRow is a queued notification as the sender reads it.
type outboxRow struct {
	id, instance int64
	target, url  string
	event        string
	attempts     int
	created      time.Time
	due          time.Time
	payload      []byte
}

// pendingDeliveries reads the oldest undelivered notifications.
func (p repo) pendingDeliveries(ctx context.Context, limit int) ([]outboxRow, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, instance_id, target, url, event, attempts, created_at, next_attempt_at, payload
		FROM alert_deliveries WHERE status = 'pending' ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read alert outbox: %w", err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.id, &r.instance, &r.target, &r.url, &r.event, &r.attempts, &r.created, &r.due, &r.payload); err != nil {
			return nil, fmt.Errorf("read alert outbox: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alert outbox: %w", err)
	}
	return out, nil
}

func (p repo) markDelivered(ctx context.Context, ids []int64) error {
	if _, err := p.pool.Exec(ctx, `UPDATE alert_deliveries SET status = 'delivered', delivered_at = now(),
		attempts = attempts + 1, last_error = '' WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("record delivered alerts: %w", err)
	}
	return nil
}

func (p repo) markRetry(ctx context.Context, ids []int64, next time.Time, cause string) error {
	if _, err := p.pool.Exec(ctx, `UPDATE alert_deliveries SET attempts = attempts + 1, next_attempt_at = $2,
		last_error = $3 WHERE id = ANY($1)`, ids, next, cause); err != nil {
		return fmt.Errorf("record failed alert delivery: %w", err)
	}
	return nil
}

func (p repo) markFailed(ctx context.Context, ids []int64, why string) error {
	if _, err := p.pool.Exec(ctx, `UPDATE alert_deliveries SET status = 'failed', last_error = $2 WHERE id = ANY($1)`,
		ids, why); err != nil {
		return fmt.Errorf("record given-up alert delivery: %w", err)
	}
	return nil
}

// persist writes an evaluation cycle in one transaction fenced by the
// leader's term: the transitions, the notifications they queue (outbox
// builds them once an instance has its id) and the watermarks. Either all
// of it happened, and the outbox will announce it, or none of it, and the
// next term replays it. It returns how many notifications it queued.
func (p repo) persist(ctx context.Context, term leader.Term, changes []Change, watermarks map[int32]time.Time,
	outbox func(inst *Instance, event string, silenced bool) ([]outboxEntry, error)) (int, error) {
	queued := 0
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := term.Fence(ctx, tx); err != nil {
			return err
		}
		for _, c := range changes {
			event, err := storeChange(ctx, tx, c)
			if err != nil {
				return err
			}
			if event == "" {
				continue
			}
			var silenced bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM alert_silences WHERE fingerprint = $1 AND ends_at > now())`,
				c.Inst.Fingerprint).Scan(&silenced); err != nil {
				return fmt.Errorf("read silences of alert %d: %w", c.Inst.ID, err)
			}
			entries, err := outbox(c.Inst, event, silenced)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if _, err := tx.Exec(ctx, `INSERT INTO alert_deliveries (instance_id, target, url, event, payload) VALUES ($1, $2, $3, $4, $5)`,
					c.Inst.ID, e.target, e.url, event, e.payload); err != nil {
					return fmt.Errorf("queue %s delivery of alert %d: %w", e.target, c.Inst.ID, err)
				}
				queued++
			}
		}
		if len(watermarks) == 0 {
			return nil
		}
		ids := make([]int32, 0, len(watermarks))
		tss := make([]time.Time, 0, len(watermarks))
		for id, ts := range watermarks {
			ids, tss = append(ids, id), append(tss, ts)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO alert_watermarks (node_id, ts)
			SELECT w.node_id, w.ts FROM unnest($1::int[], $2::timestamptz[]) AS w(node_id, ts)
			ON CONFLICT (node_id) DO UPDATE SET ts = greatest(alert_watermarks.ts, EXCLUDED.ts)`, ids, tss); err != nil {
			return fmt.Errorf("store alert watermarks: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("persist alert changes: %w", err)
	}
	return queued, nil
}

// storeChange writes one transition; it returns the event to announce
// ("firing", "resolved") or "" for none.
func storeChange(ctx context.Context, tx pgx.Tx, c Change) (string, error) {
	inst := c.Inst
	switch c.Kind {
	case ChangeCleared:
		if inst.ID != 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM alert_instances WHERE id = $1`, inst.ID); err != nil {
				return "", fmt.Errorf("clear pending alert %d: %w", inst.ID, err)
			}
		}
		return "", nil
	case ChangePending, ChangeFired:
		group, _ := json.Marshal(nonNil(inst.Group))
		labels, _ := json.Marshal(nonNil(inst.Labels))
		annotations, _ := json.Marshal(nonNil(inst.Annotations))
		var fired *time.Time
		var value *float64
		if inst.State == Firing {
			fired = &inst.FiredAt
			if v, ok := headlineValue(inst); ok {
				value = &v
			}
		}
		var nodeID *int32
		if inst.Kind == KindNode {
			nodeID = &inst.NodeID
		}
		if inst.ID == 0 {
			err := tx.QueryRow(ctx, `
				INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, node_id, node, metric, child,
					group_key, state, since, last_ts, fired_at, value, labels, annotations)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING id`,
				inst.Fingerprint, inst.RuleID, inst.RuleName, inst.Kind, inst.Severity, nodeID, inst.Node, inst.Metric,
				inst.Child, group, string(inst.State), inst.Since, inst.LastTS, fired, value, labels, annotations).Scan(&inst.ID)
			if err != nil {
				return "", fmt.Errorf("store alert %s: %w", inst.Fingerprint, err)
			}
		} else if _, err := tx.Exec(ctx, `
				UPDATE alert_instances SET state = $2, since = $3, last_ts = $4, fired_at = $5, child = $6, value = $7,
					labels = $8, annotations = $9, updated_at = now()
				WHERE id = $1`, inst.ID, string(inst.State), inst.Since, inst.LastTS, fired, inst.Child, value, labels, annotations); err != nil {
			return "", fmt.Errorf("update alert %d: %w", inst.ID, err)
		}
		if c.Kind == ChangeFired {
			return "firing", nil
		}
		return "", nil
	case ChangeResolved:
		if inst.ID == 0 { // fired and resolved before ever being stored: cannot happen, but do not page for it
			return "", nil
		}
		if _, err := tx.Exec(ctx, `UPDATE alert_instances SET state = 'resolved', resolved_at = $2, last_ts = $3, updated_at = now()
			WHERE id = $1`, inst.ID, inst.ResolvedAt, inst.LastTS); err != nil {
			return "", fmt.Errorf("resolve alert %d: %w", inst.ID, err)
		}
		return "resolved", nil
	}
	return "", nil
}
