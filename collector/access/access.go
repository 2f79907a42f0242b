package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Access enforces who may do what. One per collector; safe for concurrent use.
type Access struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	csp  string
	cop  *http.CrossOriginProtection

	noPeerOnce sync.Once
	// failures limits failed sign-ins per client address (nil: mode none,
	// where nobody signs in).
	failures *failLimiter

	mu       sync.Mutex
	lastUsed map[int64]time.Time // token id → last recorded use
}

// New checks the configuration and returns an Access over the pool (whose
// schema the collector's migrations have created).
func New(pool *pgxpool.Pool, cfg Config, log *slog.Logger) (*Access, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Access{pool: pool, cfg: cfg, log: log, now: time.Now, csp: ContentSecurityPolicy(cfg.IndexHTML),
		cop: http.NewCrossOriginProtection(), lastUsed: map[int64]time.Time{}}
	if cfg.Mode != ModeNone {
		a.failures = newFailLimiter(cfg.FailedAttemptsPerMinute, cfg.FailedAttemptsClients)
	}
	if cfg.ExternalURL != "" {
		if err := a.cop.AddTrustedOrigin(origin(cfg.ExternalURL)); err != nil {
			return nil, fmt.Errorf("trust origin of %s: %w", cfg.ExternalURL, err)
		}
	}
	if cfg.Mode == ModeProxy {
		// Said at start because it decides what a user the groups mapping
		// misses gets, which nobody sees until such a user arrives.
		if cfg.ProxyDefaultRole == "none" {
			log.Info("proxy users in no group of --auth.proxy-group-role are refused (--auth.proxy-default-role=none)", "mapped_groups", len(cfg.ProxyGroupRoles))
		} else {
			log.Warn("proxy users in no group of --auth.proxy-group-role get a role anyway (--auth.proxy-default-role), even when the proxy sends no groups header",
				"role", cfg.ProxyDefaultRole, "mapped_groups", len(cfg.ProxyGroupRoles))
		}
	}
	return a, nil
}

// Config returns the configuration in force, defaults filled in.
func (a *Access) Config() Config { return a.cfg }

// resolvedKey marks a context whose principal has been looked up, so
// stacked middleware asks the database once per request.
type resolvedKey struct{}

// authenticate finds the caller. No credential is not an error: the zero
// Principal comes back. A credential that does not work is, and so is a
// customer's whose selector does not name the tenant (a token made before
// --tenant.label changed, or before the rule): its scope could be widened
// by labels nodes choose.
func (a *Access) authenticate(r *http.Request) (Principal, error) {
	p, err := a.identify(r)
	if err == nil && p.Role == RoleCustomer && !a.cfg.Tenant.NamedBy(p.Selector) {
		return Principal{}, fmt.Errorf("customer %q selects %s, which does not name the tenant label %q; an admin must issue a new token with %s=…: %w",
			p.Name, p.Selector, a.cfg.Tenant, a.cfg.Tenant, ErrUnauthenticated)
	}
	return p, err
}

func (a *Access) identify(r *http.Request) (Principal, error) {
	ctx := r.Context()
	if a.cfg.Mode == ModeNone {
		return Principal{Name: "anonymous", Role: RoleAdmin, Via: ViaNone}, nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return Principal{}, fmt.Errorf("authorization scheme %q: use Authorization: Bearer <token>: %w", scheme, ErrUnauthenticated)
		}
		return a.Verify(ctx, strings.TrimSpace(tok))
	}
	if a.cfg.Mode == ModeProxy {
		if p, ok, err := a.proxyPrincipal(r); ok || err != nil {
			return p, err
		}
	}
	if id, ok := a.sessionCookie(r); ok {
		return a.session(ctx, id)
	}
	return Principal{}, nil
}

// Require is the middleware of a route that needs role; scoped says the
// route filters its answer by the caller's nodes (Principal.Sees,
// LabelClause), which is what lets a customer in. It answers 401 to nobody
// (or a credential that does not work), 403 to a role too low, and 404 to
// a customer outside its scope. The handler finds the caller with
// FromContext.
func (a *Access) Require(role Role, scoped bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			p := FromContext(ctx)
			if ctx.Value(resolvedKey{}) == nil {
				bearer := r.Header.Get("Authorization") != ""
				if bearer && a.signInBlocked(w, r) {
					return
				}
				var err error
				p, err = a.authenticateWithin(r)
				if bearer && errors.Is(err, ErrUnauthenticated) {
					a.signInFailed(r)
				}
				if err != nil && role != RolePublic {
					if errors.Is(err, ErrUnauthenticated) {
						if _, ok := a.sessionCookie(r); ok && r.Header.Get("Authorization") == "" {
							a.clearSessionCookies(w, r)
						}
					}
					writeError(w, r, err, a.log)
					return
				}
				if err != nil {
					p = Principal{} // a public route serves a caller with a broken credential as nobody
				}
				ctx = context.WithValue(WithPrincipal(withRemote(ctx, addrString(a.client(r))), p), resolvedKey{}, true)
			}
			switch decide(p, role, scoped) {
			case allow:
				next.ServeHTTP(w, r.WithContext(ctx))
			case unauthenticated:
				writeError(w, r, fmt.Errorf("sign in: send Authorization: Bearer <token>, or log in: %w", ErrUnauthenticated), a.log)
			case forbidden:
				writeError(w, r, fmt.Errorf("%s %s needs role %s; %s has %s: %w", r.Method, r.URL.Path, role, p.Name, p.Role, ErrForbidden), a.log)
			case hidden:
				writeError(w, r, fmt.Errorf("no API route %s %s: %w", r.Method, r.URL.Path, ErrNotFound), a.log)
			case misrouted:
				writeError(w, r, fmt.Errorf("route %s %s names no role (%q)", r.Method, r.URL.Path, role), a.log)
			}
		})
	}
}

// Metrics guards /metrics with a viewer token when --metrics.auth is set.
func (a *Access) Metrics(h http.Handler) http.Handler {
	if !a.cfg.MetricsAuth {
		return h
	}
	return a.Require(RoleViewer, false)(h)
}

// proxyPrincipal believes the proxy's user header, but only from a proxy
// address. ok is false when the request did not come through one.
func (a *Access) proxyPrincipal(r *http.Request) (p Principal, ok bool, err error) {
	peer, found := peerFrom(r.Context())
	if !found {
		a.noPeerOnce.Do(func() {
			a.log.Error("proxy mode is on but the HTTP server does not record peers (access.ConnContext); the proxy's user header is ignored")
		})
		return p, false, nil
	}
	ap, perr := netip.ParseAddrPort(peer)
	if perr != nil || !a.cfg.ProxyCIDRs.Contains(ap.Addr()) {
		return p, false, nil
	}
	user := strings.TrimSpace(r.Header.Get(a.cfg.ProxyUserHeader))
	if user == "" {
		return p, false, nil
	}
	if len(user) > 256 || strings.ContainsFunc(user, func(c rune) bool { return c < ' ' || c == 0x7f }) {
		return p, true, fmt.Errorf("proxy header %s is not a user name: %w", a.cfg.ProxyUserHeader, ErrUnauthenticated)
	}
	var groups []string
	if a.cfg.ProxyGroupsHeader != "" {
		for _, v := range r.Header.Values(a.cfg.ProxyGroupsHeader) {
			for g := range strings.SplitSeq(v, ",") {
				if g = strings.TrimSpace(g); g != "" {
					groups = append(groups, g)
				}
			}
		}
	}
	role, sel, err := a.proxyRole(user, groups)
	if err != nil {
		return p, true, err
	}
	return Principal{Name: user, Role: role, Via: ViaProxy, Selector: sel}, true, nil
}

// proxyRole maps a proxy user's groups: the highest staff role wins; a user
// in customer groups only gets that customer's scope, and one in two
// customers' groups gets neither (a scope cannot be the union of two).
func (a *Access) proxyRole(user string, groups []string) (Role, Selector, error) {
	var best Role
	var customer *GroupRole
	for _, g := range groups {
		for i, m := range a.cfg.ProxyGroupRoles {
			if m.Group != g {
				continue
			}
			if m.Role == RoleCustomer {
				if customer != nil && customer.Selector.String() != m.Selector.String() {
					return "", nil, fmt.Errorf("proxy user %s is in groups of two customers (%s, %s): %w", user, customer.Group, m.Group, ErrForbidden)
				}
				customer = &a.cfg.ProxyGroupRoles[i]
			} else if m.Role.rank() > best.rank() {
				best = m.Role
			}
		}
	}
	switch {
	case best != "":
		return best, nil, nil
	case customer != nil:
		return RoleCustomer, customer.Selector, nil
	case a.cfg.ProxyDefaultRole == "none":
		return "", nil, fmt.Errorf("proxy user %s is in no group mapped to an NBS role (--auth.proxy-group-role): %w", user, ErrForbidden)
	}
	return Role(a.cfg.ProxyDefaultRole), nil, nil
}
