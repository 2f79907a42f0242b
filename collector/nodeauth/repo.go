package nodeauth

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
)

// Credential states as stored.
const (
	stateActive  = "active"
	stateRevoked = "revoked"
)

// binding is a node name's row in node_credentials, and the labels bound
// to the name (node_bindings).
type binding struct {
	Node       string
	State      string
	SecretHash []byte
	EnrolledBy string
	EnrolledAt *time.Time
	LastUsedAt *time.Time
	LastPeer   string
	RevokedAt  *time.Time
	// Labels are the labels bound to the name; nil when none are.
	Labels map[string]string
}

type repo struct{ pool *pgxpool.Pool }

// get returns a name's binding: credential is false when no credential
// (or revocation) is bound to it; Labels are read either way (getMany of
// one name; Hellos read through lookups, which share one getMany).
func (r repo) get(ctx context.Context, node string) (b binding, credential bool, err error) {
	found, err := r.getMany(ctx, []string{node})
	if err != nil {
		return binding{Node: node}, false, err
	}
	f := found[node]
	f.b.Node = node
	return f.b, f.credential, nil
}

// enroll binds a free name to a credential hash, and to labels when it has
// none bound yet (labels nil: the fleet token, which binds none); false
// when the name is already bound (another stream or an operator was
// first).
func (r repo) enroll(ctx context.Context, node string, hash []byte, peer, by string, labels map[string]string) (bool, error) {
	ok := false
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO node_credentials (node, state, secret_hash, enrolled_by, enrolled_at, last_used_at, last_peer)
			VALUES ($1, 'active', $2, $3, now(), now(), $4)
			ON CONFLICT (node) DO NOTHING`, node, hash, by, peer)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		ok = true
		if labels == nil {
			return nil
		}
		return bindLabels(ctx, tx, node, labels, by, false)
	})
	if err != nil {
		return false, fmt.Errorf("enroll node %q: %w", node, err)
	}
	return ok, nil
}

// bindLabels binds labels to a name; replace=false keeps labels bound
// already (an enrollment never changes them: only an operator does).
func bindLabels(ctx context.Context, db access.Execer, node string, labels map[string]string, by string, replace bool) error {
	enc, err := json.Marshal(labels)
	if err != nil {
		return fmt.Errorf("encode labels: %w", err)
	}
	q := `INSERT INTO node_bindings (node, labels, set_by) VALUES ($1, $2, $3) ON CONFLICT (node) DO NOTHING`
	if replace {
		q = `INSERT INTO node_bindings (node, labels, set_by) VALUES ($1, $2, $3)
			ON CONFLICT (node) DO UPDATE SET labels = EXCLUDED.labels, set_by = EXCLUDED.set_by, set_at = now()`
	}
	if _, err := db.Exec(ctx, q, node, enc, by); err != nil {
		return fmt.Errorf("bind labels to node %q: %w", node, err)
	}
	return nil
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
	// BoundLabels are the labels bound to the name server-side (its
	// tenant among them), and who bound them.
	BoundLabels map[string]string `json:"bound_labels,omitempty"`
	BoundBy     string            `json:"bound_by,omitempty"`
	// Tenant is the tenant of the node's current row ("" for none).
	Tenant string `json:"tenant"`
	// ClaimedLabels are what the node's last Hello claimed for bound keys,
	// where it differs from what is bound (and was ignored).
	ClaimedLabels map[string]string `json:"claimed_labels,omitempty"`
	// HasData says the node has reported (it is listed under /api/v1/nodes).
	HasData   bool       `json:"has_data"`
	LastHello *time.Time `json:"last_hello,omitempty"`
	Connected bool       `json:"connected"`
}

// list returns every name that is bound or has data, by name.
func (r repo) list(ctx context.Context) ([]NodeIdentity, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT coalesce(c.node, n.name, b.node), c.state, c.enrolled_by, c.enrolled_at, c.last_used_at, c.last_peer, c.revoked_at,
			b.labels, coalesce(b.set_by, ''), coalesce(n.tenant, ''), n.claimed_labels, n.id IS NOT NULL, n.last_hello
		FROM node_credentials c
		FULL OUTER JOIN (SELECT * FROM nodes WHERE retired_at IS NULL) n ON n.name = c.node
		FULL OUTER JOIN node_bindings b ON b.node = coalesce(c.node, n.name)
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list node identities: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (NodeIdentity, error) {
		var ni NodeIdentity
		var state, by, peer *string
		var bound, claimed []byte
		if err := row.Scan(&ni.Node, &state, &by, &ni.EnrolledAt, &ni.LastUsedAt, &peer, &ni.RevokedAt,
			&bound, &ni.BoundBy, &ni.Tenant, &claimed, &ni.HasData, &ni.LastHello); err != nil {
			return ni, fmt.Errorf("scan node identity: %w", err)
		}
		for _, j := range []struct {
			b  []byte
			to *map[string]string
		}{{bound, &ni.BoundLabels}, {claimed, &ni.ClaimedLabels}} {
			if j.b != nil {
				if err := json.Unmarshal(j.b, j.to); err != nil {
					return ni, fmt.Errorf("decode labels of node %s: %w", ni.Node, err)
				}
			}
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
