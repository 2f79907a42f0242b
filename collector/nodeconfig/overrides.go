// Package nodeconfig owns what the collector pushes down to agents: threshold
// overrides by scope and live expand requests. Changes made through any
// collector reach the one holding a node's stream through PostgreSQL
// LISTEN/NOTIFY.
package nodeconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// Scope says where an override applies.
type Scope struct {
	Kind     string            `json:"kind"` // global, selector or node
	Selector map[string]string `json:"selector,omitempty"`
	Node     string            `json:"node,omitempty"`
}

// Override is one stored operator override.
type Override struct {
	ID        int64            `json:"id"`
	Scope     Scope            `json:"scope"`
	Metric    string           `json:"metric"`
	Threshold *store.Threshold `json:"threshold"`
	Disabled  bool             `json:"disabled"`
	UpdatedAt time.Time        `json:"updated_at"`
}

// ErrInvalid marks an override that cannot be stored as given.
var ErrInvalid = errkind.New(errkind.Invalid, "invalid override")

// Validate checks an override as a user submitted it.
func (o *Override) Validate() error {
	var errs []string
	switch o.Scope.Kind {
	case "global":
		if len(o.Scope.Selector) > 0 || o.Scope.Node != "" {
			errs = append(errs, "scope global takes neither selector nor node")
		}
	case "selector":
		if len(o.Scope.Selector) == 0 {
			errs = append(errs, "scope selector needs at least one label, e.g. {\"customer\":\"acme\"}")
		}
		if len(o.Scope.Selector) > schema.MaxLabels {
			errs = append(errs, fmt.Sprintf("selector names %d labels, but a node has at most %d", len(o.Scope.Selector), schema.MaxLabels))
		}
		for _, k := range slices.Sorted(maps.Keys(o.Scope.Selector)) {
			if err := schema.CheckLabelKey(k); err != nil {
				errs = append(errs, fmt.Sprintf("selector label %.80q is not a valid label key: %v", k, err))
			} else if err := schema.CheckLabelValue(o.Scope.Selector[k]); err != nil {
				errs = append(errs, fmt.Sprintf("selector label %s value: %v", k, err))
			}
		}
		if o.Scope.Node != "" {
			errs = append(errs, "scope selector takes no node")
		}
	case "node":
		if err := schema.CheckNodeName(o.Scope.Node); err != nil {
			errs = append(errs, fmt.Sprintf("scope node needs a node name, got %.256q: %v", o.Scope.Node, err))
		} else {
			o.Scope.Node = schema.CanonicalNodeName(o.Scope.Node)
		}
		if len(o.Scope.Selector) > 0 {
			errs = append(errs, "scope node takes no selector")
		}
	default:
		errs = append(errs, fmt.Sprintf("scope.kind %q must be global, selector or node", o.Scope.Kind))
	}
	if err := schema.CheckID(o.Metric); err != nil {
		errs = append(errs, fmt.Sprintf("metric %.256q is not a metric id like tcp_reset/sent/no_socket: %v", o.Metric, err))
	}
	switch {
	case o.Disabled && o.Threshold != nil:
		errs = append(errs, "give either a threshold or disabled: true, not both")
	case !o.Disabled && o.Threshold == nil:
		errs = append(errs, "threshold is required (or disabled: true to switch the metric's threshold off)")
	case o.Threshold != nil:
		if err := ingest.ValidateThreshold(*o.Threshold); err != nil {
			errs = append(errs, "threshold: "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
	}
	return nil
}

// specificity orders scopes: node beats selector beats global; among
// selectors, one naming more labels is more specific.
func (o *Override) specificity() int {
	switch o.Scope.Kind {
	case "node":
		return 1000
	case "selector":
		return 100 + len(o.Scope.Selector)
	}
	return 0
}

func (o *Override) matches(n store.Node) bool {
	switch o.Scope.Kind {
	case "node":
		return o.Scope.Node == n.Name
	case "selector":
		for k, v := range o.Scope.Selector {
			if n.Labels[k] != v {
				return false
			}
		}
		return true
	}
	return true
}

// Source names where an effective threshold comes from, for operators.
func (o *Override) Source() string {
	switch o.Scope.Kind {
	case "node":
		return "node"
	case "selector":
		keys := make([]string, 0, len(o.Scope.Selector))
		for k := range o.Scope.Selector {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + o.Scope.Selector[k]
		}
		return "selector:" + strings.Join(parts, ",")
	}
	return "global"
}

// Effective is the threshold in force for one metric of a node.
type Effective struct {
	Metric     string           `json:"metric"`
	Threshold  *store.Threshold `json:"threshold"`
	Source     string           `json:"source"`
	OverrideID int64            `json:"override_id,omitempty"`
}

// Resolve picks, per metric, the most specific override matching the node;
// ties go to the most recently updated.
func Resolve(n store.Node, overrides []Override) map[string]*Override {
	best := map[string]*Override{}
	for i := range overrides {
		o := &overrides[i]
		if !o.matches(n) {
			continue
		}
		cur := best[o.Metric]
		if cur == nil || o.specificity() > cur.specificity() ||
			(o.specificity() == cur.specificity() && o.UpdatedAt.After(cur.UpdatedAt)) {
			best[o.Metric] = o
		}
	}
	return best
}

// repo is the overrides table.
type repo struct{ pool *pgxpool.Pool }

const overrideColumns = `id, scope_kind, selector, node, metric, threshold, disabled, updated_at`

func scanOverride(row pgx.Row) (Override, error) {
	var o Override
	var sel, thr []byte
	if err := row.Scan(&o.ID, &o.Scope.Kind, &sel, &o.Scope.Node, &o.Metric, &thr, &o.Disabled, &o.UpdatedAt); err != nil {
		return o, err
	}
	if err := json.Unmarshal(sel, &o.Scope.Selector); err != nil {
		return o, fmt.Errorf("decode selector of override %d: %w", o.ID, err)
	}
	if len(o.Scope.Selector) == 0 {
		o.Scope.Selector = nil
	}
	if thr != nil {
		o.Threshold = &store.Threshold{}
		if err := json.Unmarshal(thr, o.Threshold); err != nil {
			return o, fmt.Errorf("decode threshold of override %d: %w", o.ID, err)
		}
	}
	return o, nil
}

func (r repo) list(ctx context.Context) ([]Override, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+overrideColumns+` FROM threshold_overrides ORDER BY metric, scope_kind, id`)
	if err != nil {
		return nil, fmt.Errorf("list threshold overrides: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Override, error) { return scanOverride(row) })
}

// metricsOf returns which of the metric ids among a node has defined (all
// of them when among is nil).
func (r repo) metricsOf(ctx context.Context, nodeID int32, among []string) (map[string]bool, error) {
	rows, err := r.pool.Query(ctx, `SELECT p.path FROM node_metrics m JOIN metric_paths p ON p.id = m.metric_id
		WHERE m.node_id = $1 AND ($2::text[] IS NULL OR p.path = ANY($2))`, nodeID, among)
	if err != nil {
		return nil, fmt.Errorf("read metric ids of node %d: %w", nodeID, err)
	}
	paths, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read metric ids of node %d: %w", nodeID, err)
	}
	has := make(map[string]bool, len(paths))
	for _, p := range paths {
		has[p] = true
	}
	return has, nil
}

// put sets the override of o's scope and metric and records the change in
// the audit log, in one transaction: the old value is read under a row lock,
// so the entry says exactly what was replaced.
func (r repo) put(ctx context.Context, o Override, maxOverrides int) (Override, error) {
	sel, err := json.Marshal(nonNil(o.Scope.Selector))
	if err != nil {
		return o, fmt.Errorf("encode selector: %w", err)
	}
	var thr []byte
	if o.Threshold != nil {
		if thr, err = json.Marshal(o.Threshold); err != nil {
			return o, fmt.Errorf("encode threshold: %w", err)
		}
	}
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		// Puts take turns, so concurrent ones cannot pass the cap together.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('nbs threshold_overrides'))`); err != nil {
			return err
		}
		// Twice at most: when a concurrent put creates the same override
		// between our look and our insert, the second round updates it.
		for range 2 {
			old, err := scanOverride(tx.QueryRow(ctx, `SELECT `+overrideColumns+` FROM threshold_overrides
				WHERE scope_kind = $1 AND selector = $2 AND node = $3 AND metric = $4 FOR UPDATE`, o.Scope.Kind, sel, o.Scope.Node, o.Metric))
			switch {
			case err == nil:
				if err := tx.QueryRow(ctx, `UPDATE threshold_overrides SET threshold = $2, disabled = $3, updated_at = now()
					WHERE id = $1 RETURNING id, updated_at`, old.ID, thr, o.Disabled).Scan(&o.ID, &o.UpdatedAt); err != nil {
					return err
				}
				return access.Audit(ctx, tx, access.Entry{Action: "update", ObjectKind: "threshold", ObjectID: strconv.FormatInt(o.ID, 10), Old: old, New: o})
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM threshold_overrides`).Scan(&n); err != nil {
				return err
			}
			if n >= maxOverrides {
				return fmt.Errorf("%w: there are already %d, the most allowed (limit --thresholds.max-overrides); delete some first (DELETE /api/v1/thresholds/{id})", ErrTooMany, n)
			}
			err = tx.QueryRow(ctx, `
				INSERT INTO threshold_overrides (scope_kind, selector, node, metric, threshold, disabled)
				VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope_kind, selector, node, metric) DO NOTHING
				RETURNING id, updated_at`, o.Scope.Kind, sel, o.Scope.Node, o.Metric, thr, o.Disabled).Scan(&o.ID, &o.UpdatedAt)
			if err == nil {
				return access.Audit(ctx, tx, access.Entry{Action: "create", ObjectKind: "threshold", ObjectID: strconv.FormatInt(o.ID, 10), New: o})
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		return errors.New("the override changed twice while it was being set; try again")
	})
	if errors.Is(err, ErrTooMany) {
		return o, err
	}
	if err != nil {
		return o, fmt.Errorf("store threshold override: %w", err)
	}
	return o, nil
}

// delete removes an override and records it in the audit log; found is
// false when there was none.
func (r repo) delete(ctx context.Context, id int64) (found bool, err error) {
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		old, err := scanOverride(tx.QueryRow(ctx, `DELETE FROM threshold_overrides WHERE id = $1 RETURNING `+overrideColumns, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return access.Audit(ctx, tx, access.Entry{Action: "delete", ObjectKind: "threshold", ObjectID: strconv.FormatInt(id, 10), Old: old})
	})
	if err != nil {
		return false, fmt.Errorf("delete threshold override %d: %w", id, err)
	}
	return found, nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
