package access

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Audit limits: an entry records a change, not a data dump.
const (
	maxAuditField = 256      // action, object kind, object id
	maxAuditValue = 64 << 10 // each of old and new, as JSON
	// MaxAuditLimit bounds one read of the log.
	MaxAuditLimit = 1000
)

// Entry is one change for the audit log. Who made it, with which role and
// from where comes from the context (Require, or WithPrincipal).
type Entry struct {
	Action     string // create, update, delete, revoke, expand, enroll, …
	ObjectKind string // threshold, alert_rule, token, node, …
	ObjectID   string
	// Old and New are the value before and after, encoded as JSON; nil
	// is none (nothing before a create, nothing after a delete).
	Old, New any
}

// AuditRecord is an entry as stored and listed.
type AuditRecord struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	ActorKind  string          `json:"actor_kind"`
	TokenID    *int64          `json:"token_id,omitempty"`
	Role       string          `json:"role"`
	Action     string          `json:"action"`
	ObjectKind string          `json:"object_kind"`
	ObjectID   string          `json:"object_id"`
	Old        json.RawMessage `json:"old"`
	New        json.RawMessage `json:"new"`
	RemoteAddr string          `json:"remote_addr"`
}

func (r AuditRecord) atOrNil() *time.Time { return nilTime(r.At) }

// Audit records a change. Call it with the transaction that makes the
// change, so both commit or neither does:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		… UPDATE thresholds …
//		return access.Audit(ctx, tx, access.Entry{Action: "update", ObjectKind: "threshold", ObjectID: id, Old: old, New: cur})
//	})
func Audit(ctx context.Context, db Execer, e Entry) error {
	for name, v := range map[string]string{"action": e.Action, "object kind": e.ObjectKind, "object id": e.ObjectID} {
		if v == "" && name != "object id" {
			return fmt.Errorf("audit entry: %s is empty", name)
		}
		if len(v) > maxAuditField {
			return fmt.Errorf("audit entry: %s is %d bytes, at most %d", name, len(v), maxAuditField)
		}
	}
	old, err := auditValue(e.Old)
	if err != nil {
		return fmt.Errorf("audit entry %s %s: old value: %w", e.Action, e.ObjectKind, err)
	}
	cur, err := auditValue(e.New)
	if err != nil {
		return fmt.Errorf("audit entry %s %s: new value: %w", e.Action, e.ObjectKind, err)
	}
	p := FromContext(ctx)
	r := AuditRecord{Actor: p.Name, ActorKind: string(p.Via), Role: string(p.Role), Action: e.Action,
		ObjectKind: e.ObjectKind, ObjectID: e.ObjectID, Old: old, New: cur, RemoteAddr: remoteFrom(ctx)}
	if p.Via == "" {
		// Nobody in the context: the collector acting on its own.
		r.Actor, r.ActorKind = "collector", string(ViaSystem)
	}
	if p.TokenID != 0 {
		id := p.TokenID
		r.TokenID = &id
	}
	return insertAudit(ctx, db, r)
}

// auditValue encodes a value; one too large is replaced by a note saying
// so, because losing the entry would be worse than losing its detail.
func auditValue(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	if len(b) > maxAuditValue {
		return json.Marshal(map[string]any{"truncated": true, "bytes": len(b)})
	}
	return b, nil
}

// AuditQuery filters a read of the log, newest first.
type AuditQuery struct {
	ObjectKind string
	ObjectID   string
	Since      time.Time // inclusive; zero: no bound
	Until      time.Time // exclusive; zero: no bound
	BeforeID   int64     // entries older than this id (paging); 0: none
	Limit      int       // 1 to MaxAuditLimit; 0: 100
}

// AuditLog reads the audit log.
func (a *Access) AuditLog(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.Limit < 1 || q.Limit > MaxAuditLimit {
		return nil, invalid("limit %d must be from 1 to %d", q.Limit, MaxAuditLimit)
	}
	if len(q.ObjectKind) > maxAuditField || len(q.ObjectID) > maxAuditField {
		return nil, invalid("object_kind and object_id are at most %d bytes", maxAuditField)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return nil, invalid("since (%s) must be before until (%s)", q.Since.UTC().Format(time.RFC3339), q.Until.UTC().Format(time.RFC3339))
	}
	return listAudit(ctx, a.pool, q)
}
