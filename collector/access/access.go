package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
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

// lookupTimeout bounds finding a request's caller. The lookup is one
// indexed row on the primary's pool, which heavy reads do not use, so it
// takes milliseconds; past this the database is as good as unreachable
// (a host gone mid-failover), and the client is better told so than kept
// waiting.
const lookupTimeout = 5 * time.Second

// authenticateWithin is authenticate bounded by lookupTimeout, telling a
// database that cannot be reached apart from a credential that does not
// work: the caller's credential may well be good, so the answer is 503
// with Retry-After — never 401, which would log a browser out, nor 500,
// which would send people looking for a bug.
func (a *Access) authenticateWithin(r *http.Request) (Principal, error) {
	ctx, cancel := context.WithTimeout(r.Context(), lookupTimeout)
	defer cancel()
	p, err := a.authenticate(r.WithContext(ctx))
	if err == nil || r.Context().Err() != nil || errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrForbidden) {
		return p, err
	}
	if ctx.Err() != nil || store.DatabaseDown(err) {
		return Principal{}, fmt.Errorf("check the caller's credential: %w: %w", store.ErrUnreachable, err)
	}
	return p, err
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
					httpjson.WriteError(w, r, err, a.log)
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
				httpjson.WriteError(w, r, fmt.Errorf("sign in: send Authorization: Bearer <token>, or log in: %w", ErrUnauthenticated), a.log)
			case forbidden:
				httpjson.WriteError(w, r, fmt.Errorf("%s %s needs role %s; %s has %s: %w", r.Method, r.URL.Path, role, p.Name, p.Role, ErrForbidden), a.log)
			case hidden:
				httpjson.WriteError(w, r, fmt.Errorf("no API route %s %s: %w", r.Method, r.URL.Path, ErrNotFound), a.log)
			case misrouted:
				httpjson.WriteError(w, r, fmt.Errorf("route %s %s names no role (%q)", r.Method, r.URL.Path, role), a.log)
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
