package nodeauth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Credential states as stored.
const (
	stateActive  = "active"
	stateRevoked = "revoked"
)

// binding is a node name's row in node_credentials.
type binding struct {
	Node       string
	State      string
	SecretHash []byte
	EnrolledBy string
	EnrolledAt *time.Time
	LastUsedAt *time.Time
	LastPeer   string
	RevokedAt  *time.Time
}

type repo struct{ pool *pgxpool.Pool }

const bindingColumns = `node, state, secret_hash, enrolled_by, enrolled_at, last_used_at, last_peer, revoked_at`

func scanBinding(row pgx.Row) (binding, error) {
	var b binding
	err := row.Scan(&b.Node, &b.State, &b.SecretHash, &b.EnrolledBy, &b.EnrolledAt, &b.LastUsedAt, &b.LastPeer, &b.RevokedAt)
	return b, err
}

// get returns a name's binding; ok is false when the name is bound to nothing.
func (r repo) get(ctx context.Context, node string) (b binding, ok bool, err error) {
	b, err = scanBinding(r.pool.QueryRow(ctx, `SELECT `+bindingColumns+` FROM node_credentials WHERE node = $1`, node))
	if errors.Is(err, pgx.ErrNoRows) {
		return b, false, nil
	}
	if err != nil {
		return b, false, fmt.Errorf("read credential of node %q: %w", node, err)
	}
	return b, true, nil
}

// enroll binds a free name to a credential hash; false when the name is
// already bound (another stream or an operator was first).
func (r repo) enroll(ctx context.Context, node string, hash []byte, peer string) (bool, error) {
	tag, err := r.pool.Exec(ctx, `
		INSERT INTO node_credentials (node, state, secret_hash, enrolled_by, enrolled_at, last_used_at, last_peer)
		VALUES ($1, 'active', $2, $3, now(), now(), $4)
		ON CONFLICT (node) DO NOTHING`, node, hash, "bootstrap", peer)
	if err != nil {
		return false, fmt.Errorf("enroll node %q: %w", node, err)
	}
	return tag.RowsAffected() == 1, nil
}

// issue binds a name to a new credential hash whatever it was bound to
// before (an operator's enrollment); replace=false refuses an active binding.
func (r repo) issue(ctx context.Context, node string, hash []byte, replace bool) (bool, error) {
	q := `INSERT INTO node_credentials (node, state, secret_hash, enrolled_by, enrolled_at)
		VALUES ($1, 'active', $2, 'operator', now())
		ON CONFLICT (node) DO UPDATE SET state = 'active', secret_hash = EXCLUDED.secret_hash,
			enrolled_by = 'operator', enrolled_at = now(), last_used_at = NULL, last_peer = '',
			revoked_at = NULL, updated_at = now()`
	if !replace {
		q += ` WHERE node_credentials.state <> 'active'`
	}
	tag, err := r.pool.Exec(ctx, q, node, hash)
	if err != nil {
		return false, fmt.Errorf("issue credential for node %q: %w", node, err)
	}
	return tag.RowsAffected() == 1, nil
}

// touch records a verified Hello.
func (r repo) touch(ctx context.Context, node, peer string) error {
	if _, err := r.pool.Exec(ctx, `UPDATE node_credentials SET last_used_at = now(), last_peer = $2 WHERE node = $1`, node, peer); err != nil {
		return fmt.Errorf("record use of node %q's credential: %w", node, err)
	}
	return nil
}

// revoke makes a name unusable until an operator re-enrolls it, whether or
// not it was bound before (under mutual TLS it blocks a certificate's name).
func (r repo) revoke(ctx context.Context, node string) error {
	_, err := r.pool.Exec(ctx, `
		INSERT INTO node_credentials (node, state, revoked_at) VALUES ($1, 'revoked', now())
		ON CONFLICT (node) DO UPDATE SET state = 'revoked', secret_hash = NULL, revoked_at = now(), updated_at = now()`, node)
	if err != nil {
		return fmt.Errorf("revoke node %q: %w", node, err)
	}
	return nil
}

// unbind frees a name (revoked or not) for a new enrollment; false when it
// was bound to nothing.
func (r repo) unbind(ctx context.Context, node string, onlyActive bool) (bool, error) {
	q := `DELETE FROM node_credentials WHERE node = $1`
	if onlyActive {
		q += ` AND state = 'active'`
	}
	tag, err := r.pool.Exec(ctx, q, node)
	if err != nil {
		return false, fmt.Errorf("unbind node %q: %w", node, err)
	}
	return tag.RowsAffected() == 1, nil
}

// NodeIdentity is what an operator sees of a node name's binding.
type NodeIdentity struct {
	Node string `json:"node"`
	// State is "enrolled" (a credential is bound), "revoked" (nothing may
	// report under the name until it is re-enrolled) or "not_enrolled".
	State      string     `json:"state"`
	EnrolledBy string     `json:"enrolled_by,omitempty"`
	EnrolledAt *time.Time `json:"enrolled_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	LastPeer   string     `json:"last_peer,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	// HasData says the node has reported (it is listed under /api/v1/nodes).
	HasData   bool       `json:"has_data"`
	LastHello *time.Time `json:"last_hello,omitempty"`
	Connected bool       `json:"connected"`
}

// list returns every name that is bound or has data, by name.
func (r repo) list(ctx context.Context) ([]NodeIdentity, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT coalesce(c.node, n.name), c.state, c.enrolled_by, c.enrolled_at, c.last_used_at, c.last_peer, c.revoked_at,
			n.id IS NOT NULL, n.last_hello
		FROM node_credentials c FULL OUTER JOIN nodes n ON n.name = c.node
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list node identities: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (NodeIdentity, error) {
		var ni NodeIdentity
		var state, by, peer *string
		if err := row.Scan(&ni.Node, &state, &by, &ni.EnrolledAt, &ni.LastUsedAt, &peer, &ni.RevokedAt, &ni.HasData, &ni.LastHello); err != nil {
			return ni, fmt.Errorf("scan node identity: %w", err)
		}
		ni.State = "not_enrolled"
		switch {
		case state == nil:
		case *state == stateActive:
			ni.State = "enrolled"
		case *state == stateRevoked:
			ni.State = "revoked"
		}
		if by != nil {
			ni.EnrolledBy = *by
		}
		if peer != nil {
			ni.LastPeer = *peer
		}
		return ni, nil
	})
}
