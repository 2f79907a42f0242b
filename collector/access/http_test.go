package access

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/httpjson"
)

// testServer wires the package the way the collector's route table
// (collector/api.Routes) does: Guard outside, each of the package's
// handlers behind Require with the table's role. It adds a scoped route
// listing nodes through LabelClause and one showing a node through Sees,
// standing in for the API's node routes.
func testServer(t *testing.T, a *Access, pool *pgxpool.Pool, tlsOn bool) *httptest.Server {
	t.Helper()
	r := chi.NewRouter()
	r.Route("/api/v1", func(r chi.Router) {
		for _, rt := range []struct {
			method, pattern string
			handler         http.HandlerFunc
			role            Role
		}{
			{"POST", "/login", a.HandleLogin, RolePublic},
			{"POST", "/logout", a.HandleLogout, RolePublic},
			{"GET", "/whoami", a.HandleWhoAmI, RoleCustomer},
			{"GET", "/tokens", a.HandleListTokens, RoleAdmin},
			{"POST", "/tokens", a.HandleCreateToken, RoleAdmin},
			{"DELETE", "/tokens/{id}", a.HandleRevokeToken, RoleAdmin},
			{"GET", "/audit", a.HandleAudit, RoleViewer},
		} {
			r.With(a.Require(rt.role, false)).Method(rt.method, rt.pattern, rt.handler)
		}
		r.With(a.Require(RoleViewer, true)).Get("/nodes", func(w http.ResponseWriter, r *http.Request) {
			clause, args := FromContext(r.Context()).LabelClause("labels", 1)
			rows, err := pool.Query(r.Context(), `SELECT name FROM nodes WHERE `+clause+` ORDER BY name`, args...)
			if err != nil {
				httpjson.WriteError(w, r, err, nil)
				return
			}
			names, err := collectStrings(rows)
			if err != nil {
				httpjson.WriteError(w, r, err, nil)
				return
			}
			httpjson.Write(w, 200, map[string]any{"nodes": names})
		})
		r.With(a.Require(RoleViewer, true)).Get("/nodes/{node}", func(w http.ResponseWriter, r *http.Request) {
			var labels map[string]string
			err := pool.QueryRow(r.Context(), `SELECT labels FROM nodes WHERE name = $1`, chi.URLParam(r, "node")).Scan(&labels)
			if err != nil || !FromContext(r.Context()).Sees(labels) {
				httpjson.WriteError(w, r, fmt.Errorf("node %q: %w", chi.URLParam(r, "node"), ErrNotFound), nil)
				return
			}
			httpjson.Write(w, 200, map[string]any{"name": chi.URLParam(r, "node"), "labels": labels})
		})
		r.With(a.Require(RoleOperator, true)).Post("/nodes/{node}/expand", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		})
	})
	var srv *httptest.Server
	if tlsOn {
		srv = httptest.NewTLSServer(a.Guard(r))
	} else {
		srv = httptest.NewServer(a.Guard(r))
	}
	t.Cleanup(srv.Close)
	return srv
}

func collectStrings(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}) ([]string, error) {
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// client makes requests with a bearer token or a cookie.
type client struct {
	t      *testing.T
	srv    *httptest.Server
	bearer string
	cookie *http.Cookie
}

func (c client) do(method, path string, body any) (int, []byte, *http.Response) {
	c.t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.srv.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	resp, err := c.srv.Client().Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, b, resp
}

func (c client) want(method, path string, body any, status int) []byte {
	c.t.Helper()
	got, b, _ := c.do(method, path, body)
	if got != status {
		c.t.Fatalf("%s %s: %d, want %d: %s", method, path, got, status, b)
	}
	return b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestHTTP(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO nodes (name, labels) VALUES
		('acme-1', '{"customer":"acme","rack":"r1"}'), ('acme-2', '{"customer":"acme"}'),
		('globex-1', '{"customer":"globex"}'), ('plain', '{}')`); err != nil {
		t.Fatal(err)
	}
	a, _ := newTestAccess(t, pool, Config{})
	srv := testServer(t, a, pool, false)
	nobody := client{t: t, srv: srv}

	nobody.want("GET", "/api/v1/whoami", nil, 401)
	nobody.want("GET", "/api/v1/nodes", nil, 401)

	boot, _, err := a.EnsureBootstrapAdmin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := client{t: t, srv: srv, bearer: boot}
	who := decode[WhoAmI](t, admin.want("GET", "/api/v1/whoami", nil, 200))
	if who.Name != BootstrapTokenName || who.Role != RoleAdmin || who.Via != ViaToken || who.Mode != ModeToken {
		t.Errorf("whoami %+v", who)
	}

	// Admins make tokens; the secret is in the answer once.
	tokens := map[string]string{}
	ids := map[string]int64{}
	for _, req := range []CreateTokenRequest{
		{Name: "viewer", Role: RoleViewer},
		{Name: "operator", Role: RoleOperator, ExpiresIn: "30d"},
		{Name: "acme", Role: RoleCustomer, Selector: Selector{"customer": "acme"}},
		{Name: "globex", Role: RoleCustomer, Selector: Selector{"customer": "globex"}},
	} {
		_, b, resp := admin.do("POST", "/api/v1/tokens", req)
		if resp.StatusCode != 201 || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("create %s: %d %v %s", req.Name, resp.StatusCode, resp.Header, b)
		}
		ct := decode[CreatedToken](t, b)
		if !wellFormedToken(ct.Token) || ct.Info.Name != req.Name || ct.Info.Role != req.Role || ct.Info.CreatedBy != "token:"+BootstrapTokenName {
			t.Errorf("created %+v", ct)
		}
		tokens[req.Name], ids[req.Name] = ct.Token, ct.Info.ID
	}
	bad := decode[httpjson.ErrorBody](t, admin.want("POST", "/api/v1/tokens", map[string]any{"name": "x", "role": "customer"}, 400))
	if !strings.Contains(bad.Error.Message, "needs a selector") {
		t.Errorf("customer without selector: %+v", bad)
	}
	admin.want("POST", "/api/v1/tokens", map[string]any{"name": "x", "role": "viewer", "expires_in": "forever"}, 400)
	admin.want("POST", "/api/v1/tokens", map[string]any{"name": "x", "role": "viewer", "secret": "mine"}, 400)
	admin.want("POST", "/api/v1/tokens", map[string]any{"name": "viewer", "role": "viewer"}, 409)
	admin.want("POST", "/api/v1/tokens", map[string]any{"name": strings.Repeat("x", 20000)}, 413)

	list := decode[struct{ Tokens []Token }](t, admin.want("GET", "/api/v1/tokens", nil, 200))
	if len(list.Tokens) != 5 {
		t.Errorf("%d tokens listed", len(list.Tokens))
	}
	raw := string(admin.want("GET", "/api/v1/tokens", nil, 200))
	for name, secret := range tokens {
		if strings.Contains(raw, secret[4:]) {
			t.Errorf("the list shows %s's secret", name)
		}
	}

	viewer := client{t: t, srv: srv, bearer: tokens["viewer"]}
	operator := client{t: t, srv: srv, bearer: tokens["operator"]}
	acme := client{t: t, srv: srv, bearer: tokens["acme"]}
	globex := client{t: t, srv: srv, bearer: tokens["globex"]}

	// Roles on routes.
	for _, c := range []struct {
		who          client
		method, path string
		body         any
		want         int
	}{
		{viewer, "GET", "/api/v1/tokens", nil, 403},
		{viewer, "POST", "/api/v1/tokens", map[string]any{"name": "y", "role": "admin"}, 403},
		{operator, "POST", "/api/v1/tokens", map[string]any{"name": "y", "role": "admin"}, 403},
		{viewer, "POST", "/api/v1/nodes/acme-1/expand", map[string]any{}, 403},
		{operator, "POST", "/api/v1/nodes/acme-1/expand", map[string]any{}, 204},
		{viewer, "GET", "/api/v1/audit", nil, 200},
		{acme, "GET", "/api/v1/audit", nil, 404},
		{acme, "GET", "/api/v1/tokens", nil, 404},
		{acme, "DELETE", "/api/v1/tokens/1", nil, 404},
		{acme, "POST", "/api/v1/nodes/acme-1/expand", map[string]any{}, 404},
		{acme, "GET", "/api/v1/nodes/acme-1", nil, 200},
		{acme, "GET", "/api/v1/nodes/globex-1", nil, 404},
		{acme, "GET", "/api/v1/nodes/plain", nil, 404},
		{globex, "GET", "/api/v1/nodes/globex-1", nil, 200},
		{globex, "GET", "/api/v1/nodes/acme-1", nil, 404},
		{viewer, "GET", "/api/v1/nodes/globex-1", nil, 200},
	} {
		if got, b, _ := c.who.do(c.method, c.path, c.body); got != c.want {
			t.Errorf("%s %s %s: %d, want %d: %s", c.who.bearer[:8], c.method, c.path, got, c.want, b)
		}
	}
	// A node outside the scope looks exactly like a node that does not exist.
	_, hiddenBody, _ := acme.do("GET", "/api/v1/nodes/globex-1", nil)
	_, missingBody, _ := acme.do("GET", "/api/v1/nodes/nonexistent", nil)
	if strings.ReplaceAll(string(hiddenBody), "globex-1", "N") != strings.ReplaceAll(string(missingBody), "nonexistent", "N") {
		t.Errorf("hidden %s differs from missing %s", hiddenBody, missingBody)
	}
	// The customer scope filters the SQL.
	for c, want := range map[*client][]string{
		&viewer: {"acme-1", "acme-2", "globex-1", "plain"},
		&acme:   {"acme-1", "acme-2"},
		&globex: {"globex-1"},
	} {
		got := decode[struct{ Nodes []string }](t, c.want("GET", "/api/v1/nodes", nil, 200)).Nodes
		if !slices.Equal(got, want) {
			t.Errorf("%s sees %v, want %v", c.bearer[:8], got, want)
		}
	}
	who = decode[WhoAmI](t, acme.want("GET", "/api/v1/whoami", nil, 200))
	if who.Role != RoleCustomer || who.Selector.String() != "customer=acme" {
		t.Errorf("customer whoami %+v", who)
	}

	// The login page: a token in, an HttpOnly session cookie out.
	nobody.want("POST", "/api/v1/login", map[string]string{"token": "nbs_wrong"}, 401)
	_, b, resp := nobody.do("POST", "/api/v1/login", map[string]string{"token": tokens["acme"]})
	if resp.StatusCode != 200 {
		t.Fatalf("login: %d %s", resp.StatusCode, b)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "nbs_session" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Secure ||
		cookie.MaxAge != int(DefaultSessionTTL.Seconds()) || strings.Contains(cookie.Value, tokens["acme"][4:]) {
		t.Fatalf("session cookie %+v", cookie)
	}
	if decode[WhoAmI](t, b).Via != ViaSession {
		t.Errorf("login answer %s", b)
	}
	browser := client{t: t, srv: srv, cookie: cookie}
	if got := decode[struct{ Nodes []string }](t, browser.want("GET", "/api/v1/nodes", nil, 200)).Nodes; !slices.Equal(got, []string{"acme-1", "acme-2"}) {
		t.Errorf("the acme browser sees %v", got)
	}
	// A cross-site page cannot use the cookie for a change.
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/logout", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.AddCookie(cookie)
	if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("cross-site logout: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	_, _, resp = browser.do("POST", "/api/v1/logout", nil)
	if resp.StatusCode != 204 {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	cleared := false
	for _, c := range resp.Cookies() {
		if c.Name == "nbs_session" && c.MaxAge < 0 {
			cleared = true
		}
	}
	if !cleared {
		t.Errorf("logout did not clear the cookie: %v", resp.Cookies())
	}
	_, b, resp = browser.do("GET", "/api/v1/nodes", nil)
	if resp.StatusCode != 401 || !strings.Contains(string(b), "session ended") {
		t.Errorf("after logout: %d %s", resp.StatusCode, b)
	}

	// Revoking through the API ends the token at once.
	revoked := decode[Token](t, admin.want("DELETE", fmt.Sprintf("/api/v1/tokens/%d", ids["operator"]), nil, 200))
	if revoked.State != "revoked" || revoked.RevokedBy != "token:"+BootstrapTokenName {
		t.Errorf("revoked %+v", revoked)
	}
	_, b, _ = operator.do("GET", "/api/v1/whoami", nil)
	if !strings.Contains(string(b), "was revoked") {
		t.Errorf("revoked token: %s", b)
	}
	admin.want("DELETE", "/api/v1/tokens/999999", nil, 404)
	admin.want("DELETE", "/api/v1/tokens/abc", nil, 400)

	// Token changes are in the audit log, with who, role and address.
	log := decode[struct{ Entries []AuditRecord }](t, viewer.want("GET", "/api/v1/audit?object_kind=token", nil, 200)).Entries
	// The bootstrap create (no earlier token to revoke), 4 API creates, 1 revoke.
	if len(log) != 6 {
		t.Fatalf("%d token audit entries, want 6: %+v", len(log), log)
	}
	newest := log[0]
	if newest.Action != "revoke" || newest.ObjectID != fmt.Sprint(ids["operator"]) || newest.Actor != BootstrapTokenName ||
		newest.ActorKind != "token" || newest.Role != "admin" || newest.TokenID == nil || newest.RemoteAddr != "127.0.0.1" {
		t.Errorf("revoke entry %+v", newest)
	}
	oldTok, newTok := decode[Token](t, newest.Old), decode[Token](t, newest.New)
	if oldTok.State != "live" || newTok.State != "revoked" {
		t.Errorf("revoke entry old %+v new %+v", oldTok, newTok)
	}
	if first := log[len(log)-1]; first.Action != "create" || first.ActorKind != "system" || first.Actor != "bootstrap" || string(first.Old) != "null" {
		t.Errorf("bootstrap entry %+v", first)
	}
	viewer.want("GET", "/api/v1/audit?limit=1001", nil, 400)
	viewer.want("GET", "/api/v1/audit?since=yesterday", nil, 400)
}

func TestHTTPOverTLSUsesSecureCookies(t *testing.T) {
	pool := testPool(t)
	a, _ := newTestAccess(t, pool, Config{SessionTTL: 10 * time.Minute})
	secret, _ := mustCreate(t, a, NewToken{Name: "tls", Role: RoleViewer})
	srv := testServer(t, a, pool, true)
	c := client{t: t, srv: srv}
	_, _, resp := c.do("POST", "/api/v1/login", map[string]string{"token": secret})
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-nbs_session" {
			cookie = ck
		}
	}
	if resp.StatusCode != 200 || cookie == nil || !cookie.Secure || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.MaxAge != 600 {
		t.Fatalf("login over TLS: %d, cookie %+v", resp.StatusCode, cookie)
	}
	if resp.Header.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS over TLS")
	}
	browser := client{t: t, srv: srv, cookie: cookie}
	if who := decode[WhoAmI](t, browser.want("GET", "/api/v1/whoami", nil, 200)); who.Name != "tls" || who.Via != ViaSession {
		t.Errorf("whoami %+v", who)
	}
}

// TestHTTPSAcceptsOnlyHostCookies: under HTTPS (TLS on the collector, or
// an https external URL behind a TLS proxy) a session is only believed from
// the __Host- cookie, which the browser guarantees was set by this host over
// TLS; the plain name, which anyone on the path or a sibling subdomain can
// plant, is ignored.
func TestHTTPSAcceptsOnlyHostCookies(t *testing.T) {
	pool := testPool(t)
	for _, tt := range []struct {
		name        string
		tlsOn       bool
		externalURL string
		cookie      string
		want        int
	}{
		{"TLS, __Host- cookie", true, "", secureCookieName, 200},
		{"TLS, plain cookie", true, "", cookieName, 401},
		{"https external URL, __Host- cookie", false, "https://nbs.example.com", secureCookieName, 200},
		{"https external URL, plain cookie", false, "https://nbs.example.com", cookieName, 401},
		{"plain HTTP, plain cookie", false, "", cookieName, 200},
		// Only a browser on an https origin sets it; nothing to distrust.
		{"plain HTTP, __Host- cookie", false, "", secureCookieName, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := newTestAccess(t, pool, Config{ExternalURL: tt.externalURL})
			secret, _ := mustCreate(t, a, NewToken{Name: fmt.Sprintf("cookie-%d", time.Now().UnixNano()), Role: RoleViewer})
			s, err := a.Login(context.Background(), secret, "")
			if err != nil {
				t.Fatal(err)
			}
			c := client{t: t, srv: testServer(t, a, pool, tt.tlsOn), cookie: &http.Cookie{Name: tt.cookie, Value: s.ID}}
			code, body, _ := c.do("GET", "/api/v1/whoami", nil)
			if code != tt.want {
				t.Fatalf("whoami with %s: %d %s, want %d", tt.cookie, code, body, tt.want)
			}
		})
	}
}

func TestLoginInModeNone(t *testing.T) {
	a, err := New(nil, Config{Mode: ModeNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Guard(http.HandlerFunc(a.HandleLogin)))
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(`{"token":""}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if who := decode[WhoAmI](t, b); resp.StatusCode != 200 || who.Role != RoleAdmin || who.Mode != ModeNone || len(resp.Cookies()) != 0 {
		t.Errorf("login in mode none: %d %s %v", resp.StatusCode, b, resp.Cookies())
	}
}
