package access

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/migrations"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// testPool is a fresh database with the collector's schema. The files are
// applied in order directly rather than through store.Migrate, which
// refuses a gap in the numbering while another branch owns migration 005.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgcluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for _, n := range names {
		body, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(body)); err != nil {
			t.Fatalf("apply %s: %v", n, err)
		}
	}
	return pool
}

// clock is a settable time for expiry and throttling.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestAccess(t *testing.T, pool *pgxpool.Pool, cfg Config) (*Access, *clock) {
	t.Helper()
	a, err := New(pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Now().UTC().Truncate(time.Second)}
	a.now = c.now
	return a, c
}

// asCLI is the context of an operator at the command line.
func asCLI() context.Context {
	return WithPrincipal(context.Background(), Principal{Name: "root@test", Role: RoleAdmin, Via: ViaCLI})
}

func mustCreate(t *testing.T, a *Access, n NewToken) (string, Token) {
	t.Helper()
	secret, tok, err := a.CreateToken(asCLI(), n)
	if err != nil {
		t.Fatalf("create token %q: %v", n.Name, err)
	}
	return secret, tok
}

func wantUnauthenticated(t *testing.T, err error, msg string) {
	t.Helper()
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), msg) {
		t.Errorf("error %v, want unauthenticated with %q", err, msg)
	}
}

func TestTokenLifecycle(t *testing.T) {
	pool := testPool(t)
	a, clk := newTestAccess(t, pool, Config{})
	ctx := context.Background()

	secret, tok := mustCreate(t, a, NewToken{Name: "alice", Role: RoleOperator})
	if !strings.HasPrefix(secret, "nbs_") || len(secret) != 4+52 || !wellFormedToken(secret) {
		t.Fatalf("secret %q is not nbs_ + 52 base32 characters", secret)
	}
	if tok.ID == 0 || tok.Name != "alice" || tok.Role != RoleOperator || tok.State != "live" || tok.CreatedBy != "cli:root@test" ||
		tok.Hint != secret[len(secret)-4:] || !tok.ExpiresAt.Equal(clk.now().Add(DefaultTokenTTL)) || tok.LastUsedAt != nil {
		t.Errorf("token %+v", tok)
	}
	// Only the hash is stored: no column of any row holds the secret.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM access_tokens t WHERE t::text LIKE '%' || $1 || '%'`, secret[4:]).Scan(&n); err != nil || n != 0 {
		t.Errorf("secret found in %d rows (%v)", n, err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM access_tokens WHERE hash = sha256($1::bytea)`, []byte(secret)).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rows hold the secret's SHA-256 (%v)", n, err)
	}

	p, err := a.Verify(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "alice" || p.Role != RoleOperator || p.Via != ViaToken || p.TokenID != tok.ID || p.Selector != nil {
		t.Errorf("principal %+v", p)
	}
	_, err = a.Verify(ctx, "nbs_"+strings.Repeat("a", 52))
	wantUnauthenticated(t, err, "unknown token")
	_, err = a.Verify(ctx, secret+"x")
	wantUnauthenticated(t, err, "malformed token")
	_, err = a.Verify(ctx, strings.ToUpper(secret))
	wantUnauthenticated(t, err, "malformed token")

	// A customer token carries its scope into the principal.
	csecret, _ := mustCreate(t, a, NewToken{Name: "acme", Role: RoleCustomer, Selector: Selector{"customer": "acme"}})
	cp, err := a.Verify(ctx, csecret)
	if err != nil || cp.Role != RoleCustomer || cp.Selector.String() != "customer=acme" {
		t.Errorf("customer principal %+v, %v", cp, err)
	}

	// Expiry.
	short, stok := mustCreate(t, a, NewToken{Name: "short", Role: RoleViewer, TTL: time.Hour})
	if !stok.ExpiresAt.Equal(clk.now().Add(time.Hour)) {
		t.Errorf("expires %s", stok.ExpiresAt)
	}
	clk.add(time.Hour - time.Second)
	if _, err := a.Verify(ctx, short); err != nil {
		t.Errorf("a second before expiry: %v", err)
	}
	clk.add(time.Second)
	_, err = a.Verify(ctx, short)
	wantUnauthenticated(t, err, `token "short" expired at`)

	// Revocation is immediate and idempotent.
	rt, err := a.RevokeToken(WithPrincipal(ctx, Principal{Name: "boss", Role: RoleAdmin, Via: ViaToken}), tok.ID)
	if err != nil || rt.State != "revoked" || rt.RevokedBy != "token:boss" || rt.RevokedAt == nil {
		t.Fatalf("revoke: %+v, %v", rt, err)
	}
	_, err = a.Verify(ctx, secret)
	wantUnauthenticated(t, err, `token "alice" was revoked`)
	if again, err := a.RevokeToken(ctx, tok.ID); err != nil || again.RevokedBy != "token:boss" {
		t.Errorf("revoking again: %+v, %v", again, err)
	}
	if _, err := a.RevokeToken(ctx, 999999); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking a missing token: %v", err)
	}

	ts, err := a.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, t := range ts {
		states[t.Name] = t.State
	}
	if want := map[string]string{"alice": "revoked", "acme": "live", "short": "expired"}; !mapsEqual(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestTokenLimits(t *testing.T) {
	pool := testPool(t)
	a, clk := newTestAccess(t, pool, Config{MaxTokens: 3, TokenMaxTTL: 30 * 24 * time.Hour, TokenTTL: 7 * 24 * time.Hour})
	ctx := asCLI()
	bad := []struct {
		n    NewToken
		want string
	}{
		{NewToken{Name: "", Role: RoleViewer}, "token name"},
		{NewToken{Name: strings.Repeat("a", 65), Role: RoleViewer}, "token name"},
		{NewToken{Name: "trailing ", Role: RoleViewer}, "token name"},
		{NewToken{Name: "new\nline", Role: RoleViewer}, "token name"},
		{NewToken{Name: "x", Role: "root"}, `role "root"`},
		{NewToken{Name: "x", Role: RolePublic}, `role "public"`},
		{NewToken{Name: "x", Role: RoleCustomer}, "needs a selector"},
		{NewToken{Name: "x", Role: RoleViewer, Selector: Selector{"customer": "acme"}}, "only a customer token takes a selector"},
		{NewToken{Name: "x", Role: RoleCustomer, Selector: Selector{"Customer": "acme"}}, "not a label key"},
		{NewToken{Name: "x", Role: RoleViewer, TTL: 31 * 24 * time.Hour}, "must be from 1m to 720h0m0s"},
		{NewToken{Name: "x", Role: RoleViewer, TTL: time.Second}, "must be from 1m"},
	}
	for _, b := range bad {
		if _, _, err := a.CreateToken(ctx, b.n); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want invalid with %q", b.n, err, b.want)
		}
	}
	_, tok := mustCreate(t, a, NewToken{Name: "ci deploy@example.com", Role: RoleViewer})
	if !tok.ExpiresAt.Equal(clk.now().Add(7 * 24 * time.Hour)) {
		t.Errorf("default TTL: expires %s", tok.ExpiresAt)
	}
	if _, _, err := a.CreateToken(ctx, NewToken{Name: "ci deploy@example.com", Role: RoleAdmin}); !errors.Is(err, ErrConflict) {
		t.Errorf("a second live token of one name: %v", err)
	}
	// A revoked token's name is free again.
	if _, err := a.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, a, NewToken{Name: "ci deploy@example.com", Role: RoleViewer})
	// So is an expired one's.
	mustCreate(t, a, NewToken{Name: "brief", Role: RoleViewer, TTL: time.Minute})
	clk.add(time.Minute)
	_, again := mustCreate(t, a, NewToken{Name: "brief", Role: RoleViewer})

	// Three live tokens is the limit here; expired and revoked ones don't count.
	mustCreate(t, a, NewToken{Name: "third", Role: RoleViewer})
	if _, _, err := a.CreateToken(ctx, NewToken{Name: "fourth", Role: RoleViewer}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "3 live tokens is the limit") {
		t.Errorf("over the limit: %v", err)
	}
	if _, err := a.RevokeToken(ctx, again.ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, a, NewToken{Name: "fourth", Role: RoleViewer})

	// Dead tokens are purged 30 days after they died, on the next create.
	clk.add(7*24*time.Hour + 30*24*time.Hour + time.Minute)
	mustCreate(t, a, NewToken{Name: "later", Role: RoleViewer})
	ts, err := a.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Name != "later" {
		t.Errorf("after purge: %+v", ts)
	}
}

func lastUsed(t *testing.T, pool *pgxpool.Pool, id int64) *time.Time {
	t.Helper()
	var ts *time.Time
	if err := pool.QueryRow(context.Background(), `SELECT last_used_at FROM access_tokens WHERE id = $1`, id).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestLastUsedIsThrottled(t *testing.T) {
	pool := testPool(t)
	a, clk := newTestAccess(t, pool, Config{})
	ctx := context.Background()
	secret, tok := mustCreate(t, a, NewToken{Name: "busy", Role: RoleViewer})
	if lastUsed(t, pool, tok.ID) != nil {
		t.Fatal("used before use")
	}
	t0 := clk.now()
	steps := []struct {
		a       *Access
		advance time.Duration
		want    time.Time
	}{
		{a, 0, t0},
		{a, 30 * time.Second, t0},
		{a, 29 * time.Second, t0},
		{a, 0, t0},
		{a, time.Second, t0.Add(time.Minute)},
	}
	// A second collector on the same database: its memory is empty, the
	// database's condition still holds it back (and it then waits a minute
	// from its own attempt).
	other, _ := newTestAccess(t, pool, Config{})
	other.now = clk.now
	steps = append(steps,
		struct {
			a       *Access
			advance time.Duration
			want    time.Time
		}{other, 30 * time.Second, t0.Add(time.Minute)},
		struct {
			a       *Access
			advance time.Duration
			want    time.Time
		}{other, time.Minute, t0.Add(150 * time.Second)})
	for i, s := range steps {
		clk.add(s.advance)
		if _, err := s.a.Verify(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(t, pool, tok.ID); got == nil || !got.Equal(s.want) {
			t.Errorf("step %d at +%s: last_used_at %v, want %s", i, clk.now().Sub(t0), got, s.want)
		}
	}
}

func TestSessions(t *testing.T) {
	pool := testPool(t)
	a, clk := newTestAccess(t, pool, Config{SessionTTL: time.Hour})
	ctx := context.Background()
	secret, tok := mustCreate(t, a, NewToken{Name: "web", Role: RoleCustomer, Selector: Selector{"customer": "acme"}})

	if _, err := a.Login(ctx, "nbs_nope", "192.0.2.1:5"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("login with a bad token: %v", err)
	}
	s, err := a.Login(ctx, secret, "192.0.2.1:5")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.ID) != 52 || strings.Contains(s.ID, secret[4:]) || !s.ExpiresAt.Equal(clk.now().Add(time.Hour)) {
		t.Errorf("session %+v", s)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM access_sessions s WHERE s::text LIKE '%' || $1 || '%'`, s.ID).Scan(&n); err != nil || n != 0 {
		t.Errorf("session id stored in clear in %d rows (%v)", n, err)
	}
	p, err := a.session(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Via != ViaSession || p.Name != "web" || p.Role != RoleCustomer || p.Selector.String() != "customer=acme" ||
		p.ExpiresAt == nil || !p.ExpiresAt.Equal(s.ExpiresAt) {
		t.Errorf("session principal %+v", p)
	}
	_, err = a.session(ctx, "not-a-session")
	wantUnauthenticated(t, err, "malformed session")
	_, err = a.session(ctx, strings.Repeat("a", 52))
	wantUnauthenticated(t, err, "session ended")

	clk.add(time.Hour)
	_, err = a.session(ctx, s.ID)
	wantUnauthenticated(t, err, "session expired")

	// Logout ends a session; revoking the token ends all of them.
	s1, err := a.Login(ctx, secret, "")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := a.Login(ctx, secret, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Logout(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	_, err = a.session(ctx, s1.ID)
	wantUnauthenticated(t, err, "session ended")
	if _, err := a.session(ctx, s2.ID); err != nil {
		t.Errorf("the other session: %v", err)
	}
	if _, err := a.RevokeToken(asCLI(), tok.ID); err != nil {
		t.Fatal(err)
	}
	_, err = a.session(ctx, s2.ID)
	wantUnauthenticated(t, err, "session ended")

	// A session never outlives its token.
	short, _ := mustCreate(t, a, NewToken{Name: "short", Role: RoleViewer, TTL: 10 * time.Minute})
	s3, err := a.Login(ctx, short, "")
	if err != nil {
		t.Fatal(err)
	}
	if !s3.ExpiresAt.Equal(clk.now().Add(10 * time.Minute)) {
		t.Errorf("session of a 10m token expires %s", s3.ExpiresAt.Sub(clk.now()))
	}

	// Logging in again and again keeps at most maxSessionsPerToken rows.
	for range maxSessionsPerToken + 5 {
		if _, err := a.Login(ctx, short, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM access_sessions`).Scan(&n); err != nil || n != maxSessionsPerToken {
		t.Errorf("%d sessions (%v), want %d", n, err, maxSessionsPerToken)
	}
}

func TestEnsureBootstrapAdmin(t *testing.T) {
	pool := testPool(t)
	a, _ := newTestAccess(t, pool, Config{})
	ctx := context.Background()
	first, t1, err := a.EnsureBootstrapAdmin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if t1.Name != BootstrapTokenName || t1.Role != RoleAdmin || t1.CreatedBy != "system:bootstrap" {
		t.Errorf("bootstrap token %+v", t1)
	}
	if p, err := a.Verify(ctx, first); err != nil || p.Role != RoleAdmin {
		t.Errorf("bootstrap token does not work: %+v %v", p, err)
	}
	second, t2, err := a.EnsureBootstrapAdmin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || t2.ID == t1.ID {
		t.Error("the second start got the same token")
	}
	_, err = a.Verify(ctx, first)
	wantUnauthenticated(t, err, "was revoked")
	if _, err := a.Verify(ctx, second); err != nil {
		t.Errorf("new bootstrap token: %v", err)
	}
	if got := LoginURL("http://127.0.0.1:7700/", second); got != "http://127.0.0.1:7700/login#token="+second {
		t.Errorf("LoginURL = %q", got)
	}
}

// Collectors sharing a database create tokens at once: the limit and the
// one live bootstrap token still hold.
func TestTokensUnderConcurrency(t *testing.T) {
	pool := testPool(t)
	a, _ := newTestAccess(t, pool, Config{MaxTokens: 5})
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 10 {
		wg.Go(func() {
			_, _, err := a.CreateToken(asCLI(), NewToken{Name: fmt.Sprintf("t%d", i), Role: RoleViewer})
			errs <- err
		})
	}
	for range 2 {
		wg.Go(func() {
			_, _, err := a.EnsureBootstrapAdmin(context.Background())
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var ok, limited int
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrConflict):
			limited++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	var live, boot int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE name = $1)
		FROM access_tokens WHERE revoked_at IS NULL`, BootstrapTokenName).Scan(&live, &boot); err != nil {
		t.Fatal(err)
	}
	// Live tokens can only stop at the limit: ten viewers try, and a
	// rotation of the bootstrap token frees the place it takes.
	if live != 5 || boot > 1 || ok < 5 || ok+limited != 12 {
		t.Errorf("%d created, %d refused; %d live tokens, %d live bootstrap tokens (limit 5)", ok, limited, live, boot)
	}
}

// TestTokensMintedWithoutAuth: a token created under --auth.mode=none (by
// whoever reached the port) is marked so, listed as void and refused — as
// a bearer token, at login and through its sessions — once the collector
// authenticates; one the command line made at the same time is not.
func TestTokensMintedWithoutAuth(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	open, _ := newTestAccess(t, pool, Config{Mode: ModeNone})
	srv := testServer(t, open, pool, false) // 127.0.0.1: a loopback Host, which mode none answers
	anyone := client{t: t, srv: srv}
	created := decode[CreatedToken](t, anyone.want("POST", "/api/v1/tokens", CreateTokenRequest{Name: "rebound", Role: RoleAdmin}, 201))
	if !created.Info.MintedWithoutAuth || created.Info.State != "live" || created.Info.CreatedBy != "none:anonymous" {
		t.Errorf("created under mode none: %+v, want marked, live while the mode lasts", created.Info)
	}
	cliSecret, _ := mustCreate(t, open, NewToken{Name: "from-cli", Role: RoleViewer})
	// While the mode lasts a session can be made from it (nothing checks
	// tokens then, but the login page still works).
	sess, err := open.Login(ctx, created.Token, "")
	if err != nil {
		t.Fatal(err)
	}

	for _, mode := range []Mode{ModeToken, ModeProxy} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := Config{Mode: mode}
			if mode == ModeProxy {
				cfg.ProxyCIDRs = PrefixList{netip.MustParsePrefix("10.0.0.5/32")}
			}
			a, _ := newTestAccess(t, pool, cfg)
			const why = "minted under --auth.mode=none, without authentication, and is void"
			_, err := a.Verify(ctx, created.Token)
			wantUnauthenticated(t, err, why)
			_, err = a.Login(ctx, created.Token, "")
			wantUnauthenticated(t, err, why)
			_, err = a.session(ctx, sess.ID)
			wantUnauthenticated(t, err, why)
			if p, err := a.Verify(ctx, cliSecret); err != nil || p.Name != "from-cli" {
				t.Errorf("the command line's token: %+v %v", p, err)
			}
			// Over HTTP the refusal says why.
			c := client{t: t, srv: testServer(t, a, pool, false), bearer: created.Token}
			if code, body, _ := c.do("GET", "/api/v1/whoami", nil); code != 401 || !strings.Contains(string(body), why) {
				t.Errorf("whoami: %d %s", code, body)
			}
			ts, err := a.Tokens(ctx)
			if err != nil {
				t.Fatal(err)
			}
			states := map[string]string{}
			for _, tok := range ts {
				states[tok.Name] = fmt.Sprintf("%s %v", tok.State, tok.MintedWithoutAuth)
			}
			if states["rebound"] != "void true" || states["from-cli"] != "live false" {
				t.Errorf("listed as %v, want rebound void and marked, from-cli live", states)
			}
		})
	}
}
