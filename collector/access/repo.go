package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/store"
)

// Every query of the package is in this file.

// Execer is what Audit writes through: a transaction (so the entry commits
// or rolls back with the change it records) or a pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// querier is a pool or a transaction.
type querier interface {
	Execer
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// tokenLockID serialises token creation, so the live-token limit holds
// when several collectors (or the token command) create at once.
const tokenLockID = 0x6e6273_06

// purgeAfter is how long revoked and expired tokens stay listed (and their
// names reserved in the audit trail) before they are deleted.
const purgeAfter = 30 * 24 * time.Hour

const tokenColumns = `id, name, hint, role, selector, created_by, created_at, expires_at, last_used_at, revoked_at, coalesce(revoked_by, ''),
	minted_without_auth`

func scanToken(row pgx.Row) (Token, error) {
	var t Token
	var sel []byte
	if err := row.Scan(&t.ID, &t.Name, &t.Hint, &t.Role, &sel, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt,
		&t.LastUsedAt, &t.RevokedAt, &t.RevokedBy, &t.MintedWithoutAuth); err != nil {
		return t, err
	}
	if err := json.Unmarshal(sel, &t.Selector); err != nil {
		return t, fmt.Errorf("decode selector of token %d: %w", t.ID, err)
	}
	if len(t.Selector) == 0 {
		t.Selector = nil
	}
	return t, nil
}

func lockTokens(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, tokenLockID); err != nil {
		return fmt.Errorf("lock tokens: %w", err)
	}
	return nil
}

// purgeTokens deletes tokens dead for longer than purgeAfter (their sessions
// go with them) and retires expired tokens holding name, so it can be reused.
func purgeTokens(ctx context.Context, tx pgx.Tx, name string, now time.Time) error {
	if _, err := tx.Exec(ctx, `DELETE FROM access_tokens WHERE least(revoked_at, expires_at) < $1`, now.Add(-purgeAfter)); err != nil {
		return fmt.Errorf("purge old tokens: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE access_tokens SET revoked_at = expires_at, revoked_by = 'expiry'
		WHERE name = $1 AND revoked_at IS NULL AND expires_at <= $2`, name, now); err != nil {
		return fmt.Errorf("retire expired tokens named %q: %w", name, err)
	}
	return nil
}

func countLiveTokens(ctx context.Context, tx pgx.Tx, now time.Time) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM access_tokens WHERE revoked_at IS NULL AND expires_at > $1`, now).Scan(&n); err != nil {
		return 0, fmt.Errorf("count tokens: %w", err)
	}
	return n, nil
}

func insertToken(ctx context.Context, tx pgx.Tx, t Token, hash []byte) (Token, error) {
	out, err := scanToken(tx.QueryRow(ctx, `
		INSERT INTO access_tokens (name, hash, hint, role, selector, created_by, created_at, expires_at, minted_without_auth)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING `+tokenColumns,
		t.Name, hash, t.Hint, string(t.Role), t.Selector.JSON(), t.CreatedBy, t.CreatedAt, t.ExpiresAt, t.MintedWithoutAuth))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return out, fmt.Errorf("a live token named %q exists already; revoke it first: %w", t.Name, ErrConflict)
	}
	if err != nil {
		return out, fmt.Errorf("create token %q: %w", t.Name, err)
	}
	return out, nil
}

func tokenByHash(ctx context.Context, q querier, hash []byte) (Token, error) {
	t, err := scanToken(q.QueryRow(ctx, `SELECT `+tokenColumns+` FROM access_tokens WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("unknown token: %w", ErrUnauthenticated)
	}
	if err != nil {
		return t, fmt.Errorf("look up token: %w", err)
	}
	return t, nil
}

func tokenByID(ctx context.Context, q querier, id int64, forUpdate bool) (Token, error) {
	sql := `SELECT ` + tokenColumns + ` FROM access_tokens WHERE id = $1`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	t, err := scanToken(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("token %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("read token %d: %w", id, err)
	}
	return t, nil
}

func liveTokenIDsByName(ctx context.Context, q querier, name string) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT id FROM access_tokens WHERE name = $1 AND revoked_at IS NULL ORDER BY id`, name)
	if err != nil {
		return nil, fmt.Errorf("find tokens named %q: %w", name, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("find tokens named %q: %w", name, err)
	}
	return ids, nil
}

// touchToken records a use. The condition makes collectors that share a
// database write at most once a minute between them, too.
func touchToken(ctx context.Context, q querier, id int64, now time.Time) error {
	if _, err := q.Exec(ctx, `UPDATE access_tokens SET last_used_at = $2
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $3)`, id, now, now.Add(-lastUsedEvery)); err != nil {
		return fmt.Errorf("record use of token %d: %w", id, err)
	}
	return nil
}

func listTokens(ctx context.Context, q querier) ([]Token, error) {
	rows, err := q.Query(ctx, `SELECT `+tokenColumns+` FROM access_tokens ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Token, error) { return scanToken(r) })
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return ts, nil
}

func markRevoked(ctx context.Context, tx pgx.Tx, id int64, by string, now time.Time) (Token, error) {
	t, err := scanToken(tx.QueryRow(ctx, `UPDATE access_tokens SET revoked_at = $2, revoked_by = $3
		WHERE id = $1 RETURNING `+tokenColumns, id, now, by))
	if err != nil {
		return t, fmt.Errorf("revoke token %d: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM access_sessions WHERE token_id = $1`, id); err != nil {
		return t, fmt.Errorf("end sessions of token %d: %w", id, err)
	}
	return t, nil
}

// maxSessionsPerToken bounds the rows one token can make by logging in
// again and again; the oldest go first.
const maxSessionsPerToken = 100

func insertSession(ctx context.Context, tx pgx.Tx, idHash []byte, tokenID int64, now, expires time.Time, remote string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM access_sessions WHERE expires_at <= $1`, now); err != nil {
		return fmt.Errorf("delete expired sessions: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM access_sessions WHERE id_hash IN (
		SELECT id_hash FROM access_sessions WHERE token_id = $1 ORDER BY created_at DESC OFFSET $2)`,
		tokenID, maxSessionsPerToken-1); err != nil {
		return fmt.Errorf("trim sessions of token %d: %w", tokenID, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO access_sessions (id_hash, token_id, created_at, expires_at, remote_addr)
		VALUES ($1, $2, $3, $4, $5)`, idHash, tokenID, now, expires, remote); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	return nil
}

// sessionByHash returns the session's expiry and its token.
func sessionByHash(ctx context.Context, q querier, idHash []byte) (time.Time, Token, error) {
	var expires time.Time
	var t Token
	var sel []byte
	err := q.QueryRow(ctx, `SELECT s.expires_at, t.id, t.name, t.hint, t.role, t.selector, t.created_by, t.created_at,
			t.expires_at, t.last_used_at, t.revoked_at, coalesce(t.revoked_by, ''), t.minted_without_auth
		FROM access_sessions s JOIN access_tokens t ON t.id = s.token_id WHERE s.id_hash = $1`, idHash).
		Scan(&expires, &t.ID, &t.Name, &t.Hint, &t.Role, &sel, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt,
			&t.LastUsedAt, &t.RevokedAt, &t.RevokedBy, &t.MintedWithoutAuth)
	if errors.Is(err, pgx.ErrNoRows) {
		return expires, t, fmt.Errorf("session ended; log in again: %w", ErrUnauthenticated)
	}
	if err != nil {
		return expires, t, fmt.Errorf("look up session: %w", err)
	}
	if err := json.Unmarshal(sel, &t.Selector); err != nil {
		return expires, t, fmt.Errorf("decode selector of token %d: %w", t.ID, err)
	}
	if len(t.Selector) == 0 {
		t.Selector = nil
	}
	return expires, t, nil
}

func deleteSession(ctx context.Context, q querier, idHash []byte) error {
	if _, err := q.Exec(ctx, `DELETE FROM access_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// PruneAudit deletes audit entries recorded before cutoff, oldest first,
// batch per statement (audit_log_at serves the order).
func PruneAudit(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch int) (int64, error) {
	n, err := store.DeleteInBatches(ctx, pool, `
		DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < $1 ORDER BY at, id LIMIT $2)`, batch, cutoff)
	if err != nil {
		return n, fmt.Errorf("delete audit entries before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}

func insertAudit(ctx context.Context, db Execer, r AuditRecord) error {
	if _, err := db.Exec(ctx, `INSERT INTO audit_log (at, actor, actor_kind, token_id, role, action, object_kind, object_id,
			old_value, new_value, remote_addr)
		VALUES (coalesce($1, now()), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		r.atOrNil(), r.Actor, r.ActorKind, r.TokenID, r.Role, r.Action, r.ObjectKind, r.ObjectID,
		jsonOrNil(r.Old), jsonOrNil(r.New), r.RemoteAddr); err != nil {
		return fmt.Errorf("write audit entry %s %s %s: %w", r.Action, r.ObjectKind, r.ObjectID, err)
	}
	return nil
}

func listAudit(ctx context.Context, q querier, f AuditQuery) ([]AuditRecord, error) {
	rows, err := q.Query(ctx, `SELECT id, at, actor, actor_kind, token_id, role, action, object_kind, object_id,
			old_value, new_value, remote_addr
		FROM audit_log
		WHERE ($1 = '' OR object_kind = $1) AND ($2 = '' OR object_id = $2)
			AND ($3::timestamptz IS NULL OR at >= $3) AND ($4::timestamptz IS NULL OR at < $4)
			AND ($5 = 0 OR id < $5)
		ORDER BY at DESC, id DESC LIMIT $6`,
		f.ObjectKind, f.ObjectID, nilTime(f.Since), nilTime(f.Until), f.BeforeID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditRecord, error) {
		var r AuditRecord
		err := row.Scan(&r.ID, &r.At, &r.Actor, &r.ActorKind, &r.TokenID, &r.Role, &r.Action, &r.ObjectKind,
			&r.ObjectID, &r.Old, &r.New, &r.RemoteAddr)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}

// jsonOrNil passes JSON text to a jsonb parameter, or SQL NULL.
func jsonOrNil(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func nilTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
