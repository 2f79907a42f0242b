package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// TokenPrefix starts every token, so secret scanners and people recognise
// one in a log or a paste.
const TokenPrefix = "nbs_"

// secretChars is the length of a secret after the prefix: 32 random bytes
// in lower-case base32.
const secretChars = 52

var secretEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newSecret returns 256 random bits as lower-case base32 (letters and digits
// only: a double click selects all of it).
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails; it crashes the process instead
	return strings.ToLower(secretEncoding.EncodeToString(b))
}

func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// wellFormedToken reports whether s can be a token, to refuse garbage
// without asking the database.
func wellFormedToken(s string) bool {
	body, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(body) != secretChars {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Token is a token as listed: everything but the secret.
type Token struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Hint       string     `json:"hint"` // the secret's last 4 characters
	Role       Role       `json:"role"`
	Selector   Selector   `json:"selector,omitempty"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	RevokedBy  string     `json:"revoked_by,omitempty"`
	// MintedWithoutAuth: the token was created under --auth.mode=none, by
	// whoever reached the port; it works under no other mode.
	MintedWithoutAuth bool `json:"minted_without_auth,omitempty"`
	// State is live, expired, revoked or void (minted without
	// authentication, and the collector authenticates now) at the time of
	// reading.
	State string `json:"state"`
}

func (t *Token) setState(now time.Time) {
	switch {
	case t.RevokedAt != nil && t.RevokedBy == "expiry":
		t.State = "expired"
	case t.RevokedAt != nil:
		t.State = "revoked"
	case !now.Before(t.ExpiresAt):
		t.State = "expired"
	default:
		t.State = "live"
	}
}

// check refuses a token that no longer works.
func (t Token) check(now time.Time) error {
	t.setState(now)
	switch t.State {
	case "revoked":
		return fmt.Errorf("token %q was revoked: %w", t.Name, ErrUnauthenticated)
	case "expired":
		return fmt.Errorf("token %q expired at %s: %w", t.Name, t.ExpiresAt.UTC().Format(time.RFC3339), ErrUnauthenticated)
	}
	return nil
}

// setState is Token.setState as this collector sees it: a live token
// minted without authentication is void unless the mode is still none.
func (a *Access) setState(t *Token, now time.Time) {
	t.setState(now)
	if t.State == "live" && t.MintedWithoutAuth && a.cfg.Mode != ModeNone {
		t.State = "void"
	}
}

// check refuses a token that no longer works for this collector.
func (a *Access) check(t Token, now time.Time) error {
	if err := t.check(now); err != nil {
		return err
	}
	if t.MintedWithoutAuth && a.cfg.Mode != ModeNone {
		// Anyone who reached the port could have made it (a DNS-rebinding
		// page included): it must not outlive the mode that let them.
		return fmt.Errorf("token %q was minted under --auth.mode=none, without authentication, and is void now that the collector authenticates; an admin makes a new one (and revokes this): %w", t.Name, ErrUnauthenticated)
	}
	return nil
}

func (t Token) principal(via Via) Principal {
	exp := t.ExpiresAt
	p := Principal{Name: t.Name, Role: t.Role, Via: via, TokenID: t.ID, ExpiresAt: &exp}
	if t.Role == RoleCustomer {
		p.Selector = t.Selector
	}
	return p
}

// NewToken is what a token is created from.
type NewToken struct {
	Name     string   `json:"name"`
	Role     Role     `json:"role"`
	Selector Selector `json:"selector,omitempty"`
	// TTL is how long it works; 0 is the configured default.
	TTL time.Duration `json:"-"`
}

var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@:+ -]{0,62}[A-Za-z0-9._@:+-]$|^[A-Za-z0-9]$`)

// validate checks a new token against the limits and fills its TTL.
func (n *NewToken) validate(cfg Config) error {
	var errs []error
	if !tokenNameRE.MatchString(n.Name) {
		errs = append(errs, invalid("token name %q: 1 to 64 characters of letters, digits and . _ @ : + - (spaces inside)", n.Name))
	}
	if n.Role.rank() == 0 {
		errs = append(errs, invalid("role %q must be viewer, operator, admin or customer", n.Role))
	}
	if err := n.Selector.Validate(); err != nil {
		errs = append(errs, invalid("%v", err))
	}
	switch {
	case n.Role == RoleCustomer && len(n.Selector) == 0:
		errs = append(errs, invalid("a customer token needs a selector naming its tenant, e.g. %s=acme", cfg.Tenant))
	case n.Role == RoleCustomer && !cfg.Tenant.NamedBy(n.Selector):
		errs = append(errs, invalid("a customer token's selector must name the tenant label %q (e.g. %s=acme,%s): other labels are chosen by the nodes' agents, and could widen the customer's scope", cfg.Tenant, cfg.Tenant, n.Selector))
	case n.Role != RoleCustomer && len(n.Selector) > 0:
		errs = append(errs, invalid("only a customer token takes a selector (role %s sees every node)", n.Role))
	}
	if n.TTL == 0 {
		n.TTL = min(cfg.TokenTTL, cfg.TokenMaxTTL)
	}
	if n.TTL < time.Minute || n.TTL > cfg.TokenMaxTTL {
		errs = append(errs, invalid("expiry %s must be from 1m to %s (--auth.token-max-ttl)", n.TTL, cfg.TokenMaxTTL))
	}
	return errors.Join(errs...)
}

// CreateToken makes a token and returns its secret, which is never shown
// again. The caller in ctx (WithPrincipal, or Require's) is recorded as its
// creator and in the audit log.
func (a *Access) CreateToken(ctx context.Context, n NewToken) (string, Token, error) {
	var secret string
	var out Token
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		secret, out, err = a.createToken(ctx, tx, n)
		return err
	})
	return secret, out, err
}

func (a *Access) createToken(ctx context.Context, tx pgx.Tx, n NewToken) (string, Token, error) {
	if err := n.validate(a.cfg); err != nil {
		return "", Token{}, err
	}
	now := a.now().UTC().Truncate(time.Microsecond) // PostgreSQL's resolution
	if err := lockTokens(ctx, tx); err != nil {
		return "", Token{}, err
	}
	if err := purgeTokens(ctx, tx, n.Name, now); err != nil {
		return "", Token{}, err
	}
	live, err := countLiveTokens(ctx, tx, now)
	if err != nil {
		return "", Token{}, err
	}
	if live >= a.cfg.MaxTokens {
		return "", Token{}, fmt.Errorf("%d live tokens is the limit (--auth.max-tokens); revoke some first: %w", a.cfg.MaxTokens, ErrConflict)
	}
	secret := TokenPrefix + newSecret()
	by := FromContext(ctx)
	t := Token{Name: n.Name, Hint: secret[len(secret)-4:], Role: n.Role, Selector: n.Selector,
		CreatedBy: by.actor(), CreatedAt: now, ExpiresAt: now.Add(n.TTL), MintedWithoutAuth: by.Via == ViaNone}
	if t.Role != RoleCustomer {
		t.Selector = nil
	}
	out, err := insertToken(ctx, tx, t, hashSecret(secret))
	if err != nil {
		return "", Token{}, err
	}
	a.setState(&out, now)
	if err := Audit(ctx, tx, Entry{Action: "create", ObjectKind: "token", ObjectID: fmt.Sprint(out.ID), New: out}); err != nil {
		return "", Token{}, err
	}
	return secret, out, nil
}

// Tokens lists every token, live or not (dead ones are purged after 30
// days), without secrets.
func (a *Access) Tokens(ctx context.Context) ([]Token, error) {
	ts, err := listTokens(ctx, a.pool)
	if err != nil {
		return nil, err
	}
	now := a.now()
	for i := range ts {
		a.setState(&ts[i], now)
	}
	return ts, nil
}

// RevokeToken ends a token and its sessions at once. Revoking a revoked
// token changes nothing and succeeds.
func (a *Access) RevokeToken(ctx context.Context, id int64) (Token, error) {
	var out Token
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		out, err = a.revokeToken(ctx, tx, id)
		return err
	})
	return out, err
}

func (a *Access) revokeToken(ctx context.Context, tx pgx.Tx, id int64) (Token, error) {
	now := a.now().UTC().Truncate(time.Microsecond)
	old, err := tokenByID(ctx, tx, id, true)
	if err != nil {
		return old, err
	}
	a.setState(&old, now)
	if old.RevokedAt != nil {
		return old, nil
	}
	t, err := markRevoked(ctx, tx, id, FromContext(ctx).actor(), now)
	if err != nil {
		return t, err
	}
	a.setState(&t, now)
	if err := Audit(ctx, tx, Entry{Action: "revoke", ObjectKind: "token", ObjectID: fmt.Sprint(id), Old: old, New: t}); err != nil {
		return t, err
	}
	return t, nil
}

// RevokeTokensNamed revokes every live token with the name (there is at
// most one, unless an expired one was never retired) and returns them.
func (a *Access) RevokeTokensNamed(ctx context.Context, name string) ([]Token, error) {
	var out []Token
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		out, err = a.revokeNamed(ctx, tx, name)
		return err
	})
	return out, err
}

func (a *Access) revokeNamed(ctx context.Context, tx pgx.Tx, name string) ([]Token, error) {
	ids, err := liveTokenIDsByName(ctx, tx, name)
	if err != nil {
		return nil, err
	}
	var out []Token
	for _, id := range ids {
		t, err := a.revokeToken(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Verify turns a secret into its principal, or ErrUnauthenticated saying
// why not (malformed, unknown, revoked, expired).
func (a *Access) Verify(ctx context.Context, secret string) (Principal, error) {
	t, err := a.verify(ctx, secret)
	if err != nil {
		return Principal{}, err
	}
	return t.principal(ViaToken), nil
}

func (a *Access) verify(ctx context.Context, secret string) (Token, error) {
	if !wellFormedToken(secret) {
		return Token{}, fmt.Errorf("malformed token: expected %s followed by %d letters and digits: %w", TokenPrefix, secretChars, ErrUnauthenticated)
	}
	t, err := tokenByHash(ctx, a.pool, hashSecret(secret))
	if err != nil {
		return t, err
	}
	now := a.now()
	if err := a.check(t, now); err != nil {
		return t, err
	}
	a.touch(ctx, t.ID, now)
	return t, nil
}

// touch records that a token was used, at most once a minute per token and
// collector; a failure only costs the timestamp, not the request.
func (a *Access) touch(ctx context.Context, id int64, now time.Time) {
	a.mu.Lock()
	last, ok := a.lastUsed[id]
	due := !ok || now.Sub(last) >= lastUsedEvery
	if due {
		if len(a.lastUsed) >= 4*a.cfg.MaxTokens {
			// Bounded: forget entries older than the throttle window.
			for k, v := range a.lastUsed {
				if now.Sub(v) >= lastUsedEvery {
					delete(a.lastUsed, k)
				}
			}
		}
		a.lastUsed[id] = now
	}
	a.mu.Unlock()
	if !due {
		return
	}
	if err := touchToken(ctx, a.pool, id, now.UTC().Truncate(time.Microsecond)); err != nil && ctx.Err() == nil {
		a.log.Warn("token last use not recorded", "token", id, "err", err)
	}
}

// ParseTTL reads a duration as Go writes it (720h, 30m) or in days (90d).
func ParseTTL(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > 100*365 {
			return 0, fmt.Errorf("%q: days must be a whole number from 1 to 36500", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	ttl, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 720h or 90d", s)
	}
	return ttl, nil
}
