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
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/ingest"
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
}

// Authenticator implements ingest.Authenticator.
type Authenticator struct {
	mode      Mode
	repo      repo
	bootstrap *BootstrapToken
	idmap     *reload.Files[IdentityMap]
	log       *slog.Logger
}

var _ ingest.Authenticator = (*Authenticator)(nil)

// NewAuthenticator reads the files the mode needs; errors name the file.
func NewAuthenticator(pool *pgxpool.Pool, opts Options, log *slog.Logger) (*Authenticator, error) {
	a := &Authenticator{mode: opts.Mode, repo: repo{pool}, log: log}
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

// Mode is the mode the authenticator runs in.
func (a *Authenticator) Mode() Mode { return a.mode }

func denied(format string, args ...any) error {
	return status.Errorf(codes.PermissionDenied, format, args...)
}

// reenrollHint ends every refusal an operator can resolve.
func reenrollHint(node string) string {
	return fmt.Sprintf("if this is the node and it lost its credential, an operator can re-enroll it: nbs-collector nodes reenroll %s", node)
}

// Authenticate checks that the stream may report under the Hello's name.
// Refusals are PermissionDenied with a message for the agent's operator;
// nothing is stored for a refused Hello.
func (a *Authenticator) Authenticate(ctx context.Context, h *nbsv1.Hello) (ingest.Grant, error) {
	node := h.GetNodeName()
	b, bound, err := a.repo.get(ctx, node)
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
	switch a.mode {
	case ModeNone:
		return ingest.Grant{}, nil
	case ModeMTLS:
		return ingest.Grant{}, a.checkCertificate(ctx, node)
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
		return ingest.Grant{}, nil
	}

	token := proof.GetBootstrapToken()
	if token == "" {
		what := "no bootstrap token"
		if proof.GetNodeCredential() != "" {
			what = "a node credential this collector does not know (was the node re-enrolled or deleted?) and no bootstrap token"
		}
		how := "give the agent the fleet bootstrap token (--node.bootstrap-token-file)"
		if a.bootstrap == nil {
			how = "this collector has no bootstrap token, so an operator must enroll it: nbs-collector nodes enroll " + node
		}
		st, _ := status.New(codes.PermissionDenied, fmt.Sprintf("node %q is not enrolled and this Hello carries %s: %s", node, what, how)).
			WithDetails(&errdetails.ErrorInfo{Reason: ReasonNotEnrolled, Domain: ErrorDomain})
		return ingest.Grant{}, st.Err()
	}
	if a.bootstrap == nil {
		return ingest.Grant{}, denied("node %q: this collector enrolls no nodes itself (it has no --grpc.bootstrap-token-file); an operator must enroll it: nbs-collector nodes enroll %s", node, node)
	}
	if !a.bootstrap.Matches(token) {
		return ingest.Grant{}, denied("node %q: the bootstrap token is not this fleet's", node)
	}
	cred, hash, err := NewCredential()
	if err != nil {
		a.log.Error("new node credential", "err", err)
		return ingest.Grant{}, status.Error(codes.Internal, "collector cannot create a node credential")
	}
	ok, err := a.repo.enroll(ctx, node, hash, peerAddr(ctx))
	if err != nil {
		a.log.Error("enroll node", "node", node, "err", err)
		return ingest.Grant{}, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
	}
	if !ok {
		return ingest.Grant{}, denied("node %q was enrolled by another stream just now; %s", node, reenrollHint(node))
	}
	a.log.Info("node enrolled with the bootstrap token", "node", node, "peer", peerAddr(ctx))
	return ingest.Grant{Credential: cred}, nil
}

// checkCertificate requires the verified client certificate to stand for
// the node, itself or through the identity map.
func (a *Authenticator) checkCertificate(ctx context.Context, node string) error {
	var ids []string
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 && len(info.State.VerifiedChains[0]) > 0 {
			ids = CertIdentities(info.State.VerifiedChains[0][0])
		}
	}
	if len(ids) == 0 {
		return denied("node %q: this collector verifies node names by client certificate (--grpc.node-auth=mtls), and the stream has no verified client certificate with a DNS name or common name", node)
	}
	for _, id := range ids {
		if id == node {
			return nil
		}
	}
	if a.idmap != nil {
		m := a.idmap.Get()
		for _, id := range ids {
			if m.Allows(id, node) {
				return nil
			}
		}
	}
	return denied("node %q: the client certificate is for %s, which may not report as %q; issue the agent a certificate for %q (DNS SAN or CN), or map the identity to it in --grpc.node-identity-map-file",
		node, quoteAll(ids), node, node)
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
