package nodeauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/tenant"
	"github.com/nbs-project/nbs/internal/schema"
)

// notifyChannel tells every collector to end a node's stream after an
// operator changed what may report under its name.
const notifyChannel = "nbs_node_identity"

// Streams is what Admin needs from the ingest server of this collector.
type Streams interface {
	Connected(node string) bool
	Disconnect(node string, cause error) bool
}

// Errors of Admin operations; the HTTP handlers map them to status codes.
var (
	ErrInvalidName     = errkind.New(errkind.Invalid, "invalid node name")
	ErrAlreadyEnrolled = errkind.New(errkind.Conflict, "already enrolled")
)

// Admin is what operators do with node identities. The CLI runs it without
// streams (it is not a collector); every change is announced to the
// collectors, which end the streams it invalidates.
type Admin struct {
	origin  uint64 // tags this process's notifications, which it applied already
	repo    repo
	store   *store.Store
	streams Streams // nil in the CLI
	mode    Mode    // the collector's, for listings; "" in the CLI
	tenant  tenant.Key
	log     *slog.Logger
}

// NewAdmin returns an Admin; key is the tenant label (--tenant.label).
func NewAdmin(st *store.Store, streams Streams, mode Mode, key tenant.Key, log *slog.Logger) *Admin {
	if key == "" {
		key = tenant.DefaultKey
	}
	return &Admin{origin: rand.Uint64(), repo: repo{st.Pool()}, store: st, streams: streams, mode: mode, tenant: key, log: log}
}

// checkName refuses an invalid name and folds a valid one to its
// canonical form in place (schema.CanonicalNodeName), so an operator's
// NODE-A is the node that reports as node-a.
func checkName(node *string) error {
	canonical, err := schema.NormalizeNodeName(*node)
	if err != nil {
		return fmt.Errorf("%w %q: %v", ErrInvalidName, *node, err)
	}
	*node = canonical
	return nil
}

// List returns every name that is bound or has reported.
func (a *Admin) List(ctx context.Context) ([]NodeIdentity, error) {
	ids, err := a.repo.list(ctx)
	if err != nil {
		return nil, err
	}
	if a.streams != nil {
		for i := range ids {
			ids[i].Connected = a.streams.Connected(ids[i].Node)
		}
	}
	return ids, nil
}

// Enroll binds the name to a new credential and returns it (shown once),
// for a node without the bootstrap token or to rotate a credential. An
// enrolled name needs replace, which ends its current stream. labels,
// when not nil, are bound to the name too (its tenant), as Label does.
func (a *Admin) Enroll(ctx context.Context, node string, replace bool, labels map[string]string) (string, error) {
	if err := checkName(&node); err != nil {
		return "", err
	}
	if labels != nil {
		if err := checkLabels(labels, a.tenant, false); err != nil {
			return "", err
		}
	}
	cred, hash, err := NewCredential()
	if err != nil {
		return "", err
	}
	ok, err := a.repo.issue(ctx, node, hash, replace)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("node %q: %w (replace its credential explicitly, or re-enroll it to let it enroll with the bootstrap token)", node, ErrAlreadyEnrolled)
	}
	if labels != nil {
		if err := a.Label(ctx, node, labels); err != nil {
			return "", fmt.Errorf("node %q: its labels were not bound, so its new credential is not shown (run enroll --replace again): %w", node, err)
		}
	}
	a.log.Info("node enrolled by an operator", "node", node, "replaced", replace)
	a.audit(ctx, "enroll", node)
	a.announce(ctx, change{Node: node, Action: "enroll"})
	return cred, nil
}

// Revoke shuts the name out: its stream ends now and no credential,
// certificate or bootstrap token may report under it until it is re-enrolled.
func (a *Admin) Revoke(ctx context.Context, node string) error {
	if err := checkName(&node); err != nil {
		return err
	}
	if err := a.repo.revoke(ctx, node); err != nil {
		return err
	}
	a.log.Info("node revoked", "node", node)
	a.audit(ctx, "revoke", node)
	a.announce(ctx, change{Node: node, Action: "revoke"})
	return nil
}

// audit records who changed a node's identity. The change is made by then;
// a lost entry is logged rather than undoing it.
func (a *Admin) audit(ctx context.Context, action, node string) {
	if err := access.Audit(ctx, a.repo.pool, access.Entry{Action: action, ObjectKind: "node", ObjectID: node}); err != nil {
		a.log.Error("audit a node change", "action", action, "node", node, "err", err)
	}
}

// Reenroll frees the name (revoked or enrolled): its stream ends, and the
// next Hello with the bootstrap token enrolls it with a new credential.
// False when the name was bound to nothing.
func (a *Admin) Reenroll(ctx context.Context, node string) (bool, error) {
	if err := checkName(&node); err != nil {
		return false, err
	}
	ok, err := a.repo.unbind(ctx, node, false)
	if err != nil || !ok {
		return false, err
	}
	a.log.Info("node may enroll again", "node", node)
	a.audit(ctx, "reenroll", node)
	a.announce(ctx, change{Node: node, Action: "reenroll"})
	return true, nil
}

// Delete deletes the node's data, its credential and its bound labels. A revocation stays (to
// keep the name out for good, revoke it too); a running agent that still
// has the bootstrap token enrolls again. ErrNotFound when the name has
// neither data nor credential.
func (a *Admin) Delete(ctx context.Context, node string) error {
	return a.delete(ctx, node, "delete")
}

// Expire is Delete for a node that has not reported for the node
// retention (collector/retention); the audit log says "expire".
func (a *Admin) Expire(ctx context.Context, node string) error {
	return a.delete(ctx, node, "expire")
}

// Refresh ends the nodes' streams, here and on the other collectors,
// after a retention pass pruned definitions they had not reported for
// the retention: the agent reconnects, and its Hello registers again what
// it still has, before it reports any of it.
func (a *Admin) Refresh(ctx context.Context, nodes []string) {
	for _, node := range nodes {
		a.announce(ctx, change{Node: node, Action: "refresh"})
	}
}

// ExpireUnreported deletes a node that registered and never reported
// (collector/retention, --retention.unreported-nodes), so that names
// enrolled and never used do not hold places under --ingest.max-nodes.
// Its credential and bound labels stay, as they would for a name enrolled
// and not yet registered: a node that comes back with its credential
// registers again under its tenant, and the names a bootstrap token may
// enroll stay counted against it. The audit log says "expire_unreported".
func (a *Admin) ExpireUnreported(ctx context.Context, node string) error {
	if err := checkName(&node); err != nil {
		return err
	}
	// The stream ends before the row goes, so it cannot write after.
	a.announce(ctx, change{Node: node, Action: "expire_unreported"})
	if err := a.store.DeleteNode(ctx, node); err != nil {
		return err
	}
	a.log.Info("node deleted: it registered and never reported", "node", node)
	a.audit(ctx, "expire_unreported", node)
	return nil
}

func (a *Admin) delete(ctx context.Context, node, action string) error {
	if err := checkName(&node); err != nil {
		return err
	}
	unbound, err := a.repo.unbind(ctx, node, true)
	if err != nil {
		return err
	}
	// Its labels go with it: a name enrolled again later is a new node,
	// whose tenant its enrollment decides.
	tag, err := a.repo.pool.Exec(ctx, `DELETE FROM node_bindings WHERE node = $1`, node)
	if err != nil {
		return fmt.Errorf("unbind labels of node %q: %w", node, err)
	}
	unbound = unbound || tag.RowsAffected() > 0
	// The stream ends before the data goes, so it cannot write more after.
	a.announce(ctx, change{Node: node, Action: action})
	err = a.store.DeleteNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) && unbound {
		err = nil
	}
	if err != nil {
		return err
	}
	a.log.Info("node deleted with its data", "node", node, "why", action)
	a.audit(ctx, action, node)
	return nil
}

type change struct {
	Node   string `json:"node"`
	Action string `json:"action"` // enroll, revoke, reenroll, label, delete, expire, expire_unreported or refresh
	Origin uint64 `json:"origin"`
}

// cause is the status the node's agent gets when its stream is ended.
func (c change) cause() error {
	switch c.Action {
	case "revoke":
		return status.Errorf(codes.PermissionDenied, "node %q was revoked by an operator", c.Node)
	case "delete":
		return status.Errorf(codes.Aborted, "node %q was deleted by an operator", c.Node)
	case "label":
		return status.Errorf(codes.Aborted, "node %q's labels (its tenant) were changed by an operator; reconnect to report under them", c.Node)
	case "expire":
		return status.Errorf(codes.Aborted, "node %q was deleted: it had not reported for the node retention", c.Node)
	case "expire_unreported":
		return status.Errorf(codes.Aborted, "node %q was deleted: it registered and never reported (--retention.unreported-nodes); reconnect to register again", c.Node)
	case "refresh":
		return status.Errorf(codes.Aborted, "node %q: the collector pruned metric definitions it had not reported for the retention; reconnect to announce the metrics it has", c.Node)
	default:
		return status.Errorf(codes.Aborted, "node %q's credential was changed by an operator; reconnect with the current one", c.Node)
	}
}

// announce ends the stream here at once and tells the other collectors.
func (a *Admin) announce(ctx context.Context, c change) {
	c.Origin = a.origin
	a.apply(c)
	payload, _ := json.Marshal(c)
	if _, err := a.repo.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, string(payload)); err != nil {
		a.log.Warn("tell other collectors to end the node's stream", "node", c.Node, "err", err)
	}
}

func (a *Admin) apply(c change) {
	if a.streams != nil && a.streams.Disconnect(c.Node, c.cause()) {
		a.log.Info("ended the node's stream", "node", c.Node, "why", c.Action)
	}
}

// Listen follows other collectors' (and the CLI's) changes until ctx ends,
// reconnecting after database errors.
func (a *Admin) Listen(ctx context.Context, pool *pgxpool.Pool) {
	backoff := time.Second
	for ctx.Err() == nil {
		err := a.listenOnce(ctx, pool)
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("node identity listener lost; retrying", "err", err, "in", backoff)
		select {
		case <-time.After(backoff + rand.N(backoff/2)):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (a *Admin) listenOnce(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listener connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return fmt.Errorf("listen %s: %w", notifyChannel, err)
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var c change
		if err := json.Unmarshal([]byte(n.Payload), &c); err != nil || c.Node == "" {
			a.log.Warn("ignoring malformed node identity notification", "payload", n.Payload, "err", err)
			continue
		}
		// Applied again here, it could end the stream the node opened since.
		if c.Origin != a.origin {
			a.apply(c)
		}
	}
}
