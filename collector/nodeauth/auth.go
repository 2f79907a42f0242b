// Package nodeauth binds node names to the credentials that may report under
// them. Under mutual TLS the client certificate's identity must be the name
// its Hello gives (or be mapped to it by the operator); with enrollment a
// node presents the fleet's bootstrap token once and gets a node credential
// that every later Hello for that name must carry. Operators list, revoke,
// re-enroll and delete nodes through Admin (the collector's `nodes`
// subcommand and the HTTP API).
package nodeauth

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/tenant"
	"github.com/nbs-project/nbs/internal/reload"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Mode is how a collector verifies the node names in Hellos.
type Mode string

const (
	// ModeNone verifies nothing: any client that reaches the gRPC port may
	// report as any node. For trusted networks and `make run`.
	ModeNone Mode = "none"
	// ModeEnroll binds each name to a node credential at its first Hello
	// (with the fleet bootstrap token) or by an operator.
	ModeEnroll Mode = "enroll"
	// ModeMTLS requires the client certificate's identity to be the name.
	ModeMTLS Mode = "mtls"
)

// ParseMode accepts none, enroll or mtls.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeNone, ModeEnroll, ModeMTLS:
		return m, nil
	}
	return "", fmt.Errorf("%q: use none, enroll or mtls", s)
}

// ReasonNotEnrolled is the google.rpc.ErrorInfo reason (domain ErrorDomain)
// of a refusal because the name is bound to nothing: an agent holding a
// credential the collector no longer knows (re-enrolled by an operator)
// falls back to its bootstrap token on it. The agent has its own copy of
// these strings; they are part of the wire contract (see nbs.proto).
const (
	ReasonNotEnrolled = "NODE_NOT_ENROLLED"
	ErrorDomain       = "nbs.v1"
)

// Options configure an Authenticator.
type Options struct {
	Mode Mode
	// BootstrapTokenFile holds the fleet's bootstrap token (ModeEnroll).
	// Without one, only nodes an operator enrolled can report.
	BootstrapTokenFile string
	// IdentityMapFile lets certificate identities report as other names
	// (ModeMTLS); read again when it changes.
	IdentityMapFile string
	// Tenant is the label key naming a node's tenant (default
	// tenant.DefaultKey): wherever names are verified, a Hello has no say
	// over it.
	Tenant tenant.Key
}

// Authenticator implements ingest.Authenticator.
type Authenticator struct {
	mode      Mode
	tenant    tenant.Key
	repo      repo
	bootstrap *BootstrapToken
	idmap     *reload.Files[IdentityMap]
	log       *slog.Logger
	// db is the one database connection authenticating takes at a time:
	// the shared reads of bindings (lookups) and, for one Hello at a time,
	// what verifying its proof reads and writes.
	db      chan struct{}
	lookups *lookups
}

var _ ingest.Authenticator = (*Authenticator)(nil)

// NewAuthenticator reads the files the mode needs; errors name the file.
func NewAuthenticator(pool *pgxpool.Pool, opts Options, log *slog.Logger) (*Authenticator, error) {
	if opts.Tenant == "" {
		opts.Tenant = tenant.DefaultKey
	}
	a := &Authenticator{mode: opts.Mode, tenant: opts.Tenant, repo: repo{pool}, log: log, db: make(chan struct{}, 1)}
	a.lookups = &lookups{repo: a.repo, db: a.db}
	if opts.BootstrapTokenFile != "" {
		t, err := LoadBootstrapToken(opts.BootstrapTokenFile)
		if err != nil {
			return nil, err
		}
		a.bootstrap = t
	}
	if opts.IdentityMapFile != "" {
		m, err := reload.New(func() (IdentityMap, error) { return LoadIdentityMap(opts.IdentityMapFile) }, log, opts.IdentityMapFile)
		if err != nil {
			return nil, err
		}
		a.idmap = m
	}
	return a, nil
}

// BoundsItsConnections says that Authenticate holds at most one database
// connection however many Hellos call it at once (ingest.SelfBounded):
// Hellos waiting share one read of their names' bindings.
func (a *Authenticator) BoundsItsConnections() {}

// Mode is the mode the authenticator runs in.
func (a *Authenticator) Mode() Mode { return a.mode }

func denied(format string, args ...any) error {
	return status.Errorf(codes.PermissionDenied, format, args...)
}

// reenrollHint ends every refusal an operator can resolve.
func reenrollHint(node string) string {
	return fmt.Sprintf("if this is the node and it lost its credential, an operator can re-enroll it: nbs-collector nodes reenroll %s", node)
}

// Authenticate checks that the stream may report under the Hello's name,
// and grants it the labels bound to the name (its tenant): they replace
// whatever the Hello says for those keys. Refusals are PermissionDenied
// with a message for the agent's operator; nothing is stored for a refused
// Hello.
func (a *Authenticator) Authenticate(ctx context.Context, h *nbsv1.Hello) (ingest.Grant, error) {
	node := h.GetNodeName()
	b, bound, err := a.lookups.get(ctx, node)
	if err != nil {
		a.log.Error("read node credential", "node", node, "err", err)
		return ingest.Grant{}, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
	}
	// A revocation holds in every mode, so an operator can shut a name out
	// even where names are otherwise not verified.
	if bound && b.State == stateRevoked {
		when := ""
		if b.RevokedAt != nil {
			when = " at " + b.RevokedAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		return ingest.Grant{}, denied("node %q was revoked by an operator%s and may not report; to let it back in: nbs-collector nodes reenroll %s",
			node, when, node)
	}
	if a.mode == ModeNone {
		// Nothing proves who the client is, so an unbound name's labels
		// are its agent's word; labels an operator bound still hold.
		return ingest.Grant{Bound: b.Labels}, nil
	}
	// Verifying a proof may read and write: one Hello at a time.
	select {
	case a.db <- struct{}{}:
	case <-ctx.Done():
		return ingest.Grant{}, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-a.db }()
	switch a.mode {
	case ModeMTLS:
		labels, err := a.checkCertificate(ctx, node, b.Labels)
		if err != nil {
			return ingest.Grant{}, err
		}
		return a.grant(labels), nil
	}

	proof := h.GetAuth()
	if bound {
		cred := proof.GetNodeCredential()
		switch {
		case cred == "":
			return ingest.Grant{}, denied("node %q is enrolled, and this Hello carries no node credential (a bootstrap token cannot take over an enrolled name); %s",
				node, reenrollHint(node))
		case !VerifyCredential(cred, b.SecretHash):
			return ingest.Grant{}, denied("node %q is enrolled with another node credential than this Hello carries; %s", node, reenrollHint(node))
		}
		if err := a.repo.touch(ctx, node, peerAddr(ctx)); err != nil {
			a.log.Warn("record node credential use", "node", node, "err", err)
		}
		return a.grant(b.Labels), nil
	}

	token := proof.GetBootstrapToken()
	if token == "" {
		what := "no bootstrap token"
		if proof.GetNodeCredential() != "" {
			what = "a node credential this collector does not know (was the node re-enrolled or deleted?) and no bootstrap token"
		}
		how := "give the agent a bootstrap token (--node.bootstrap-token-file): the fleet's, or its tenant's (nbs-collector nodes bootstrap create)"
		st, _ := status.New(codes.PermissionDenied, fmt.Sprintf("node %q is not enrolled and this Hello carries %s: %s", node, what, how)).
			WithDetails(&errdetails.ErrorInfo{Reason: ReasonNotEnrolled, Domain: ErrorDomain})
		return ingest.Grant{}, st.Err()
	}
	enroller, err := a.enroller(ctx, node, token)
	if err != nil {
		return ingest.Grant{}, err
	}
	// A tenant's token enrolls only into its tenant: a name an operator
	// bound elsewhere is not its to take.
	if enroller.labels != nil && b.Labels != nil && !agree(b.Labels, enroller.labels) {
		return ingest.Grant{}, denied("node %q is bound to %s, and bootstrap token %q enrolls into %s; an operator can move the node: nbs-collector nodes label %s %s",
			node, labelString(b.Labels), enroller.name, labelString(enroller.labels), node, labelString(enroller.labels))
	}
	if enroller.id != 0 {
		ok, err := a.repo.useBootstrapToken(ctx, enroller.id)
		if err != nil {
			a.log.Error("count a bootstrap token's enrollment", "token", enroller.name, "err", err)
			return ingest.Grant{}, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
		}
		if !ok {
			return ingest.Grant{}, denied("node %q: bootstrap token %q has enrolled as many nodes as it may (or was revoked or expired just now); an operator can create another: nbs-collector nodes bootstrap create",
				node, enroller.name)
		}
	}
	cred, hash, err := NewCredential()
	if err != nil {
		a.log.Error("new node credential", "err", err)
		return ingest.Grant{}, status.Error(codes.Internal, "collector cannot create a node credential")
	}
	ok, err := a.repo.enroll(ctx, node, hash, peerAddr(ctx), enroller.by(), enroller.labels)
	if err != nil {
		a.log.Error("enroll node", "node", node, "err", err)
		return ingest.Grant{}, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
	}
	if !ok {
		return ingest.Grant{}, denied("node %q was enrolled by another stream just now; %s", node, reenrollHint(node))
	}
	labels := b.Labels
	if labels == nil {
		labels = enroller.labels
	}
	a.log.Info("node enrolled with a bootstrap token", "node", node, "token", enroller.by(), "labels", labels, "peer", peerAddr(ctx))
	g := a.grant(labels)
	g.Credential = cred
	return g, nil
}

// grant is what a verified name may report with: its bound labels, and
// no say over the tenant key or any bound one.
func (a *Authenticator) grant(bound map[string]string) ingest.Grant {
	return ingest.Grant{Bound: bound, Protected: []string{a.tenant.String()}}
}

// enrolling is the bootstrap token a Hello enrolls with: the fleet's (id 0,
// binds no labels) or a tenant's.
type enrolling struct {
	id     int64
	name   string
	labels map[string]string
}

func (e enrolling) by() string {
	if e.id == 0 {
		return "bootstrap"
	}
	return "bootstrap:" + e.name
}

// enroller finds which bootstrap token a Hello carries.
func (a *Authenticator) enroller(ctx context.Context, node, token string) (enrolling, error) {
	if a.bootstrap.Matches(token) {
		return enrolling{name: "fleet"}, nil
	}
	t, ok, err := a.repo.bootstrapToken(ctx, token)
	if err != nil {
		a.log.Error("look up bootstrap token", "node", node, "err", err)
		return enrolling{}, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
	}
	if !ok {
		return enrolling{}, denied("node %q: the bootstrap token is not this fleet's, nor a live tenant token (revoked, expired or never issued); an operator must enroll it (nbs-collector nodes enroll %s) or give it a live bootstrap token", node, node)
	}
	return enrolling{id: t.ID, name: t.Name, labels: t.Labels}, nil
}

// agree reports whether two label sets give the same value to every key
// they share.
func agree(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; ok && w != v {
			return false
		}
	}
	return true
}

// labelString is labels in their command-line form, keys sorted.
func labelString(labels map[string]string) string { return access.Selector(labels).String() }

// checkCertificate requires the verified client certificate to stand for
// the node, itself or through the identity map, and returns the labels
// bound to the node: the operator's (nbs-collector nodes label), with the
// tenant the certificate names (URI SAN urn:nbs:tenant:…) and the
// identity map's labels. Where they disagree, the Hello is refused: two
// operator decisions conflict, and guessing which holds could put the
// node in the wrong tenant.
func (a *Authenticator) checkCertificate(ctx context.Context, node string, operator map[string]string) (map[string]string, error) {
	var cert *x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 && len(info.State.VerifiedChains[0]) > 0 {
			cert = info.State.VerifiedChains[0][0]
		}
	}
	var ids []string
	if cert != nil {
		ids = CertIdentities(cert)
	}
	if len(ids) == 0 {
		return nil, denied("node %q: this collector verifies node names by client certificate (--grpc.node-auth=mtls), and the stream has no verified client certificate with a DNS name or common name", node)
	}
	var mapped map[string]string
	// DNS names compare without case, and node names are lower case
	// (schema.CanonicalNodeName): a certificate for NODE-A is node-a's.
	allowed := slices.ContainsFunc(ids, func(id string) bool { return strings.EqualFold(id, node) })
	if a.idmap != nil {
		m := a.idmap.Get()
		for _, id := range ids {
			if m.Allows(id, node) {
				allowed = true
				for k, v := range m[strings.ToLower(id)].Labels {
					if mapped == nil {
						mapped = map[string]string{}
					}
					mapped[k] = v
				}
			}
		}
	}
	if !allowed {
		return nil, denied("node %q: the client certificate is for %s, which may not report as %q; issue the agent a certificate for %q (DNS SAN or CN), or map the identity to it in --grpc.node-identity-map-file",
			node, quoteAll(ids), node, node)
	}
	tenant, err := CertTenant(cert)
	if err != nil {
		return nil, denied("node %q: %v", node, err)
	}
	fromCert := mapped
	if tenant != "" {
		if v, ok := fromCert[a.tenant.String()]; ok && v != tenant {
			return nil, denied("node %q: its certificate names tenant %q and the identity map binds %s=%s; fix one of them", node, tenant, a.tenant, v)
		}
		fromCert = maps.Clone(fromCert)
		if fromCert == nil {
			fromCert = map[string]string{}
		}
		fromCert[a.tenant.String()] = tenant
	}
	if !agree(operator, fromCert) {
		return nil, denied("node %q: its certificate (or the identity map) binds %s, and an operator bound %s; reissue the certificate or rebind the node (nbs-collector nodes label %s …)",
			node, labelString(fromCert), labelString(operator), node)
	}
	if fromCert == nil {
		return operator, nil
	}
	out := maps.Clone(operator)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, fromCert)
	return out, nil
}

func quoteAll(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = fmt.Sprintf("%q", id)
	}
	return strings.Join(q, ", ")
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
