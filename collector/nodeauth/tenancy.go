package nodeauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/tenant"
)

// A tenant's bootstrap token enrolls new node names into its labels
// (its tenant), so a customer's fleet can enroll itself without any of its
// nodes being able to choose another tenant. Like node credentials it is a
// prefix and 256 random bits; the collector keeps its SHA-256.
const (
	bootstrapPrefix = "nbsb1_"
	// MaxBootstrapTokens bounds the live tenant bootstrap tokens.
	MaxBootstrapTokens = 1000
	// DefaultBootstrapTTL and MaxBootstrapTTL bound how long one lives:
	// enrollment is a rollout's moment, not a standing door.
	DefaultBootstrapTTL = 30 * 24 * time.Hour
	MaxBootstrapTTL     = 365 * 24 * time.Hour
	// DefaultBootstrapMaxNodes is how many names a tenant's bootstrap
	// token enrolls when its creator says nothing: a token is handed to a
	// customer's fleet, and without a bound its holder could enroll names
	// until --ingest.max-nodes refused every other tenant's new node. A
	// larger rollout asks for more (--max-nodes, up to 1<<24).
	DefaultBootstrapMaxNodes = 1000
)

var bootstrapNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Errors of bootstrap token and label operations.
var (
	ErrInvalidLabels    = errkind.New(errkind.Invalid, "invalid labels")
	ErrTooManyBootstrap = errkind.New(errkind.Conflict, "too many bootstrap tokens")
)

// BootstrapTokenInfo is what an operator sees of a tenant's bootstrap token.
type BootstrapTokenInfo struct {
	ID        int64             `json:"id"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	MaxNodes  *int              `json:"max_nodes,omitempty"`
	Enrolled  int               `json:"enrolled"`
	CreatedBy string            `json:"created_by"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
	RevokedAt *time.Time        `json:"revoked_at,omitempty"`
}

// NewBootstrapToken asks for a tenant's bootstrap token.
type NewBootstrapToken struct {
	Name     string            `json:"name"`
	Labels   map[string]string `json:"labels"`
	TTL      time.Duration     `json:"-"`
	MaxNodes int               `json:"max_nodes,omitempty"` // 0: DefaultBootstrapMaxNodes
}

// bootstrapToken finds a live tenant bootstrap token.
func (r repo) bootstrapToken(ctx context.Context, token string) (BootstrapTokenInfo, bool, error) {
	var t BootstrapTokenInfo
	if len(token) > maxBootstrapToken {
		return t, false, nil
	}
	h := sha256.Sum256([]byte(token))
	var labels []byte
	err := r.pool.QueryRow(ctx, `SELECT id, name, labels FROM node_bootstrap_tokens
		WHERE hash = $1 AND revoked_at IS NULL AND expires_at > now()`, h[:]).Scan(&t.ID, &t.Name, &labels)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, false, nil
	}
	if err != nil {
		return t, false, fmt.Errorf("look up bootstrap token: %w", err)
	}
	if err := json.Unmarshal(labels, &t.Labels); err != nil {
		return t, false, fmt.Errorf("decode labels of bootstrap token %s: %w", t.Name, err)
	}
	return t, true, nil
}

// useBootstrapToken counts one enrollment against the token's limit;
// false when it has none left (or died since it was looked up).
func (r repo) useBootstrapToken(ctx context.Context, id int64) (bool, error) {
	tag, err := r.pool.Exec(ctx, `UPDATE node_bootstrap_tokens SET enrolled = enrolled + 1
		WHERE id = $1 AND revoked_at IS NULL AND expires_at > now() AND (max_nodes IS NULL OR enrolled < max_nodes)`, id)
	if err != nil {
		return false, fmt.Errorf("count an enrollment of bootstrap token %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// checkLabels checks labels an operator binds to nodes; requireTenant
// says they must name the tenant (a tenant's bootstrap token must).
func checkLabels(labels map[string]string, key tenant.Key, requireTenant bool) error {
	if err := access.Selector(labels).Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidLabels, err)
	}
	if requireTenant && !key.NamedBy(labels) {
		return fmt.Errorf("%w: they must name the tenant, e.g. %s=acme (the tenant label is --tenant.label %q)", ErrInvalidLabels, key, key)
	}
	return nil
}

// CreateBootstrapToken issues a tenant's bootstrap token and returns it
// (shown once) with what is stored of it.
func (a *Admin) CreateBootstrapToken(ctx context.Context, n NewBootstrapToken) (string, BootstrapTokenInfo, error) {
	var info BootstrapTokenInfo
	var errs []error
	if !bootstrapNameRE.MatchString(n.Name) {
		errs = append(errs, fmt.Errorf("%w: bootstrap token name %q: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidLabels, n.Name))
	}
	if err := checkLabels(n.Labels, a.tenant, true); err != nil {
		errs = append(errs, err)
	}
	if n.TTL == 0 {
		n.TTL = DefaultBootstrapTTL
	}
	if n.TTL < time.Minute || n.TTL > MaxBootstrapTTL {
		errs = append(errs, fmt.Errorf("%w: expiry %s must be from 1m to %s", ErrInvalidLabels, n.TTL, MaxBootstrapTTL))
	}
	if n.MaxNodes == 0 {
		n.MaxNodes = DefaultBootstrapMaxNodes
	}
	if n.MaxNodes < 1 || n.MaxNodes > 1<<24 {
		errs = append(errs, fmt.Errorf("%w: max nodes %d must be from 1 to %d (default %d)", ErrInvalidLabels, n.MaxNodes, 1<<24, DefaultBootstrapMaxNodes))
	}
	if err := errors.Join(errs...); err != nil {
		return "", info, err
	}
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(secret); err != nil {
		return "", info, fmt.Errorf("random bootstrap token: %w", err)
	}
	token := bootstrapPrefix + base64.RawURLEncoding.EncodeToString(secret)
	hash := sha256.Sum256([]byte(token))
	labels, _ := json.Marshal(n.Labels) // a map of strings always encodes
	maxNodes := &n.MaxNodes
	actor := access.FromContext(ctx).Name
	err := pgx.BeginFunc(ctx, a.repo.pool, func(tx pgx.Tx) error {
		var live int
		// Serialises creations, so the bound holds.
		if _, err := tx.Exec(ctx, `LOCK TABLE node_bootstrap_tokens IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM node_bootstrap_tokens WHERE revoked_at IS NULL AND expires_at > now()`).Scan(&live); err != nil {
			return err
		}
		if live >= MaxBootstrapTokens {
			return fmt.Errorf("%w: %d live, at most %d; revoke unused ones (nbs-collector nodes bootstrap revoke)", ErrTooManyBootstrap, live, MaxBootstrapTokens)
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM node_bootstrap_tokens WHERE name = $1 AND revoked_at IS NULL)`, n.Name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return errkind.Errorf(errkind.Conflict, "a live bootstrap token is named %q; revoke it first or choose another name", n.Name)
		}
		return tx.QueryRow(ctx, `INSERT INTO node_bootstrap_tokens (name, hash, labels, max_nodes, created_by, expires_at)
			VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
			RETURNING id, created_at, expires_at`, n.Name, hash[:], labels, maxNodes, actor, n.TTL.Seconds()).
			Scan(&info.ID, &info.CreatedAt, &info.ExpiresAt)
	})
	if err != nil {
		return "", info, fmt.Errorf("create bootstrap token %q: %w", n.Name, err)
	}
	info.Name, info.Labels, info.MaxNodes, info.CreatedBy = n.Name, n.Labels, maxNodes, actor
	a.log.Info("tenant bootstrap token created", "name", n.Name, "labels", n.Labels, "expires", info.ExpiresAt)
	if err := access.Audit(ctx, a.repo.pool, access.Entry{Action: "create", ObjectKind: "node_bootstrap_token", ObjectID: n.Name, New: info}); err != nil {
		a.log.Error("audit a bootstrap token", "name", n.Name, "err", err)
	}
	return token, info, nil
}

// ListBootstrapTokens lists the tenant bootstrap tokens, live first.
func (a *Admin) ListBootstrapTokens(ctx context.Context) ([]BootstrapTokenInfo, error) {
	rows, err := a.repo.pool.Query(ctx, `SELECT id, name, labels, max_nodes, enrolled, created_by, created_at, expires_at, revoked_at
		FROM node_bootstrap_tokens ORDER BY revoked_at IS NOT NULL, name, id`)
	if err != nil {
		return nil, fmt.Errorf("list bootstrap tokens: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (BootstrapTokenInfo, error) {
		var t BootstrapTokenInfo
		var labels []byte
		if err := row.Scan(&t.ID, &t.Name, &labels, &t.MaxNodes, &t.Enrolled, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt); err != nil {
			return t, fmt.Errorf("list bootstrap tokens: %w", err)
		}
		return t, json.Unmarshal(labels, &t.Labels)
	})
}

// RevokeBootstrapToken revokes the live token of that name; nodes it
// enrolled keep their credentials and tenant.
func (a *Admin) RevokeBootstrapToken(ctx context.Context, name string) error {
	tag, err := a.repo.pool.Exec(ctx, `UPDATE node_bootstrap_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL`, name)
	if err != nil {
		return fmt.Errorf("revoke bootstrap token %q: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return errkind.Errorf(errkind.NotFound, "no live bootstrap token is named %q", name)
	}
	a.log.Info("tenant bootstrap token revoked", "name", name)
	if err := access.Audit(ctx, a.repo.pool, access.Entry{Action: "revoke", ObjectKind: "node_bootstrap_token", ObjectID: name}); err != nil {
		a.log.Error("audit a bootstrap token", "name", name, "err", err)
	}
	return nil
}

// Label binds labels to a node name (replacing what was bound; none
// unbinds them): its tenant among them. The node's row changes at once —
// a new row when its tenant changes, so what it reported before stays its
// old tenant's — and its stream ends, so its agent reconnects under the
// new labels and gets the Config (ping peers) of its new tenant.
func (a *Admin) Label(ctx context.Context, node string, labels map[string]string) error {
	if err := checkName(&node); err != nil {
		return err
	}
	if err := checkLabels(labels, a.tenant, false); err != nil {
		return err
	}
	b, _, err := a.repo.get(ctx, node)
	if err != nil {
		return err
	}
	by := "operator:" + access.FromContext(ctx).Name
	if len(labels) == 0 {
		if _, err := a.repo.pool.Exec(ctx, `DELETE FROM node_bindings WHERE node = $1`, node); err != nil {
			return fmt.Errorf("unbind labels of node %q: %w", node, err)
		}
	} else if err := bindLabels(ctx, a.repo.pool, node, labels, by, true); err != nil {
		return err
	}
	// Keys no longer bound leave the row (the tenant key always, unless
	// bound): the agent's next Hello brings back those it may set.
	unset := []string{a.tenant.String()}
	for k := range b.Labels {
		unset = append(unset, k)
	}
	unset = slices.DeleteFunc(unset, func(k string) bool { _, keep := labels[k]; return keep })
	if _, err := a.store.Rebind(ctx, node, labels, unset, a.tenant.Of(labels)); err != nil {
		return err
	}
	a.log.Info("node labels bound by an operator", "node", node, "labels", labels, "before", b.Labels)
	if err := access.Audit(ctx, a.repo.pool, access.Entry{Action: "label", ObjectKind: "node", ObjectID: node,
		Old: nilIfEmpty(b.Labels), New: nilIfEmpty(labels)}); err != nil {
		a.log.Error("audit a node's labels", "node", node, "err", err)
	}
	a.announce(ctx, change{Node: node, Action: "label"})
	return nil
}

// reservedBy marks a binding made by Reserve: retention keeps it.
const reservedBy = "reserve:"

// Reserve binds labels (naming a tenant) to a name no node has yet, so
// that another tenant's bootstrap token cannot enroll it first: node names
// are one namespace, and the operator decides who gets which. Unlike the
// bindings of names enrolled and never used, a reservation does not
// expire; Label replaces it (no labels: releases it).
func (a *Admin) Reserve(ctx context.Context, node string, labels map[string]string) error {
	if err := checkName(&node); err != nil {
		return err
	}
	if err := checkLabels(labels, a.tenant, true); err != nil {
		return err
	}
	b, bound, err := a.repo.get(ctx, node)
	if err != nil {
		return err
	}
	exists, err := a.store.NodeExists(ctx, node)
	if err != nil {
		return err
	}
	if bound || exists || b.Labels != nil {
		return errkind.Errorf(errkind.Conflict, "node %q is enrolled, has reported or has labels bound already; move it with: nbs-collector nodes label %s %s",
			node, node, labelString(labels))
	}
	if err := bindLabels(ctx, a.repo.pool, node, labels, reservedBy+access.FromContext(ctx).Name, false); err != nil {
		return err
	}
	a.log.Info("node name reserved", "node", node, "labels", labels)
	if err := access.Audit(ctx, a.repo.pool, access.Entry{Action: "reserve", ObjectKind: "node", ObjectID: node, New: maps.Clone(labels)}); err != nil {
		a.log.Error("audit a node name reservation", "node", node, "err", err)
	}
	return nil
}

func nilIfEmpty(m map[string]string) any {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// PruneUnused deletes, up to batch rows a statement, the credentials and
// bound labels of names that have no node (never registered, or deleted)
// and were last used (or enrolled) before cutoff. A revocation stays:
// that is an operator keeping a name out.
func PruneUnused(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for _, q := range []string{
		`DELETE FROM node_credentials WHERE node IN (
			SELECT c.node FROM node_credentials c
			WHERE c.state = 'active' AND coalesce(c.last_used_at, c.enrolled_at, c.updated_at) < $1
			  AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = c.node) LIMIT $2)`,
		`DELETE FROM node_bindings WHERE node IN (
			SELECT b.node FROM node_bindings b
			WHERE b.set_at < $1 AND b.set_by NOT LIKE '` + reservedBy + `%'
			  AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = b.node)
			  AND NOT EXISTS (SELECT 1 FROM node_credentials c WHERE c.node = b.node) LIMIT $2)`,
	} {
		n, err := store.DeleteInBatches(ctx, pool, q, batch, cutoff)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune unused node credentials: %w", err)
		}
	}
	return total, nil
}
