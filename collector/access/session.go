package access

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Session cookies. With Secure the __Host- prefix makes the browser refuse
// the cookie unless it is Secure, host-only and for path / — so a sibling
// subdomain cannot plant one.
const (
	cookieName       = "nbs_session"
	secureCookieName = "__Host-nbs_session"
)

// Session is a login: the cookie's secret and when it ends.
type Session struct {
	ID        string
	ExpiresAt time.Time
	Principal Principal
}

// Login turns a token into a session that lasts --auth.session-ttl, never
// beyond the token's own expiry.
func (a *Access) Login(ctx context.Context, secret, remote string) (Session, error) {
	t, err := a.verify(ctx, secret)
	if err != nil {
		return Session{}, err
	}
	now := a.now().UTC().Truncate(time.Microsecond)
	s := Session{ID: newSecret(), ExpiresAt: now.Add(a.cfg.SessionTTL)}
	if t.ExpiresAt.Before(s.ExpiresAt) {
		s.ExpiresAt = t.ExpiresAt
	}
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		return insertSession(ctx, tx, hashSecret(s.ID), t.ID, now, s.ExpiresAt, remote)
	})
	if err != nil {
		return Session{}, err
	}
	s.Principal = t.principal(ViaSession)
	exp := s.ExpiresAt
	s.Principal.ExpiresAt = &exp
	return s, nil
}

// session resolves a cookie's session id.
func (a *Access) session(ctx context.Context, id string) (Principal, error) {
	if len(id) != secretChars || strings.ContainsFunc(id, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') }) {
		return Principal{}, fmt.Errorf("malformed session cookie; log in again: %w", ErrUnauthenticated)
	}
	expires, t, err := sessionByHash(ctx, a.pool, hashSecret(id))
	if err != nil {
		return Principal{}, err
	}
	now := a.now()
	if !now.Before(expires) {
		return Principal{}, fmt.Errorf("session expired at %s; log in again: %w", expires.UTC().Format(time.RFC3339), ErrUnauthenticated)
	}
	if err := a.check(t, now); err != nil {
		return Principal{}, err
	}
	a.touch(ctx, t.ID, now)
	p := t.principal(ViaSession)
	p.ExpiresAt = &expires
	return p, nil
}

// Logout ends a session; ending one that is gone already succeeds.
func (a *Access) Logout(ctx context.Context, id string) error {
	return deleteSession(ctx, a.pool, hashSecret(id))
}

// secure reports whether cookies must be Secure: the request came over TLS,
// or people reach NBS over https through a TLS-terminating proxy.
func (a *Access) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(a.cfg.ExternalURL, "https://")
}

// sessionCookie finds the session id. Under HTTPS only the __Host- cookie
// counts: the plain name carries no guarantee of where it came from (a
// sibling subdomain, or a man in the middle on plain HTTP, can set it), so
// accepting it beside the prefixed one would undo what the prefix is for.
func (a *Access) sessionCookie(r *http.Request) (string, bool) {
	names := []string{secureCookieName, cookieName}
	if a.secure(r) {
		names = names[:1]
	}
	for _, name := range names {
		if c, err := r.Cookie(name); err == nil && c.Value != "" {
			return c.Value, true
		}
	}
	return "", false
}

func (a *Access) setSessionCookie(w http.ResponseWriter, r *http.Request, s Session) {
	name := cookieName
	if a.secure(r) {
		name = secureCookieName
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: s.ID, Path: "/", Expires: s.ExpiresAt,
		MaxAge: max(1, int(s.ExpiresAt.Sub(a.now()).Seconds())), HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteStrictMode})
}

// clearSessionCookies removes both spellings, whichever the browser has.
func (a *Access) clearSessionCookies(w http.ResponseWriter, r *http.Request) {
	for _, name := range []string{cookieName, secureCookieName} {
		http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
			Secure: name == secureCookieName || a.secure(r), SameSite: http.SameSiteStrictMode})
	}
}
