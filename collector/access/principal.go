package access

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Via says how a principal proved who it is.
type Via string

const (
	ViaToken   Via = "token"   // Authorization: Bearer
	ViaSession Via = "session" // the login page's cookie
	ViaProxy   Via = "proxy"   // a trusted reverse proxy's user header
	ViaNone    Via = "none"    // --auth.mode=none: everyone is admin
	ViaCLI     Via = "cli"     // nbs-collector token …, on the database directly
	ViaSystem  Via = "system"  // the collector itself (bootstrap)
)

// Principal is the caller of a request. The zero value is nobody: it may call
// public routes only and Sees no node.
type Principal struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	Via  Via    `json:"via"`
	// Selector is a customer's scope; nil for every other role.
	Selector Selector `json:"selector,omitempty"`
	// TokenID is the token behind a token or session principal.
	TokenID int64 `json:"token_id,omitempty"`
	// ExpiresAt is when the credential stops working (token or session).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Authenticated reports whether the principal is somebody.
func (p Principal) Authenticated() bool { return p.Role.rank() > 0 }

// Sees reports whether a node with these labels exists for the principal.
// A handler that finds a node it may not see must answer exactly as if the
// node did not exist (same status, same message).
func (p Principal) Sees(labels map[string]string) bool {
	switch {
	case !p.Authenticated():
		return false
	case p.Role == RoleCustomer:
		// A customer without a selector cannot exist (tokens and proxy
		// mappings refuse it); refuse here too rather than show all.
		return len(p.Selector) > 0 && p.Selector.Matches(labels)
	}
	return true
}

// SeesAll reports whether the principal is unscoped, so fleet-wide
// aggregates may be served without filtering.
func (p Principal) SeesAll() bool { return p.Authenticated() && p.Role != RoleCustomer }

// LabelClause is Sees for SQL: a boolean expression on a jsonb labels column
// and the arguments it needs, numbered from argN. For example
//
//	clause, extra := p.LabelClause("n.labels", len(args)+1)
//	rows, err := pool.Query(ctx, `SELECT … FROM nodes n WHERE `+clause, append(args, extra...)...)
func (p Principal) LabelClause(column string, argN int) (string, []any) {
	switch {
	case !p.Authenticated(), p.Role == RoleCustomer && len(p.Selector) == 0:
		return "FALSE", nil
	case p.Role != RoleCustomer:
		return "TRUE", nil
	}
	return fmt.Sprintf("%s @> $%d::jsonb", column, argN), []any{p.Selector.JSON()}
}

// actor is how created_by and revoked_by name a principal: a session acts
// with its token's name.
func (p Principal) actor() string {
	via := p.Via
	switch via {
	case "":
		return "system:collector"
	case ViaSession:
		via = ViaToken
	}
	return string(via) + ":" + p.Name
}

type ctxKey int

const (
	principalKey ctxKey = iota
	remoteKey
	peerKey
)

// FromContext returns the caller that Require put in the request's context;
// without one it is the zero Principal, who sees nothing.
func FromContext(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey).(Principal)
	return p
}

// WithPrincipal is for callers outside HTTP (the token command, tests)
// that act as someone, so Audit and CreateToken know who.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey, p)
}

func withRemote(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, remoteKey, addr)
}

func remoteFrom(ctx context.Context) string {
	s, _ := ctx.Value(remoteKey).(string)
	return s
}

// ConnContext must be the http.Server's ConnContext: it records the TCP
// peer before any middleware can disguise it (chi's RealIP, for one,
// rewrites RemoteAddr from headers any client can send). Only that peer
// decides whether the proxy's user header is trusted, and whether
// X-Forwarded-For names the client (client.go).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey, c.RemoteAddr().String())
}

func peerFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(peerKey).(string)
	return s, ok
}
