package access

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/nbs-project/nbs/collector/httpjson"
)

// serveAs runs a request through Require from a TCP peer, as ConnContext
// would have recorded it, and returns the status and the principal the
// handler saw.
func serveAs(t *testing.T, a *Access, role Role, scoped bool, r *http.Request, peer string) (int, Principal) {
	t.Helper()
	if peer != "" {
		r = r.WithContext(context.WithValue(r.Context(), peerKey, peer))
	}
	var seen Principal
	h := a.Require(role, scoped)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = FromContext(r.Context())
		w.WriteHeader(http.StatusOK)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code, seen
}

func TestProxyMode(t *testing.T) {
	cfg := Config{Mode: ModeProxy, ProxyCIDRs: PrefixList{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::1/128")},
		ProxyGroupsHeader: "X-Forwarded-Groups"}
	for _, m := range []string{"nbs-admins=admin", "nbs-ops=operator", "acme=customer:customer=acme", "acme-eu=customer:customer=acme", "globex=customer:customer=globex"} {
		if err := cfg.ProxyGroupRoles.Set(m); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(nil, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	lenient := cfg
	lenient.ProxyDefaultRole = "viewer"
	aLenient, err := New(nil, lenient, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		a      *Access
		peer   string
		header map[string][]string
		role   Role
		scoped bool
		want   int
		who    Principal
	}{
		{"a user without a groups header is refused by default", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"alice"}}, RoleViewer, false, 403, Principal{}},
		{"a user with a misspelt groups header is refused by default", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"alice"}, "X-Forwarded-Group": {"nbs-admins"}}, RoleViewer, false, 403, Principal{}},
		{"an explicit default role is given to a user in no group", aLenient, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"alice"}}, RoleViewer, false, 200,
			Principal{Name: "alice", Role: RoleViewer, Via: ViaProxy}},
		{"groups map to the highest role", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"bob"}, "X-Forwarded-Groups": {"dev,nbs-ops", "nbs-admins"}}, RoleAdmin, false, 200,
			Principal{Name: "bob", Role: RoleAdmin, Via: ViaProxy}},
		{"a staff group beats a customer group", a, "[fd00::1]:5000", map[string][]string{"X-Forwarded-User": {"carol"}, "X-Forwarded-Groups": {"acme,nbs-ops"}}, RoleOperator, false, 200,
			Principal{Name: "carol", Role: RoleOperator, Via: ViaProxy}},
		{"a customer group scopes the user", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"dave@acme"}, "X-Forwarded-Groups": {"acme, acme-eu"}}, RoleViewer, true, 200,
			Principal{Name: "dave@acme", Role: RoleCustomer, Via: ViaProxy, Selector: Selector{"customer": "acme"}}},
		{"a customer user is hidden from unscoped routes", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"dave@acme"}, "X-Forwarded-Groups": {"acme"}}, RoleViewer, false, 404, Principal{}},
		{"two customers' groups are refused", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"eve"}, "X-Forwarded-Groups": {"acme,globex"}}, RoleViewer, true, 403, Principal{}},
		{"no mapped group with default none is refused", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"frank"}, "X-Forwarded-Groups": {"dev"}}, RoleViewer, false, 403, Principal{}},
		{"the header from outside the proxy CIDRs is ignored", a, "192.0.2.9:41000", map[string][]string{"X-Forwarded-User": {"mallory"}, "X-Forwarded-Groups": {"nbs-admins"}}, RoleViewer, false, 401, Principal{}},
		{"the header without a recorded peer is ignored", a, "", map[string][]string{"X-Forwarded-User": {"mallory"}}, RoleViewer, false, 401, Principal{}},
		{"no user header from the proxy is nobody", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-Groups": {"nbs-admins"}}, RoleViewer, false, 401, Principal{}},
		{"a control character in the user is refused", a, "10.0.0.5:41000", map[string][]string{"X-Forwarded-User": {"al\x01ice"}}, RoleViewer, false, 401, Principal{}},
		{"public routes serve anyone", a, "192.0.2.9:41000", nil, RolePublic, false, 200, Principal{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api/v1/nodes", nil)
			// RemoteAddr is what RealIP may have rewritten; it must not count.
			r.RemoteAddr = "10.0.0.5:1"
			for k, vs := range tt.header {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			code, who := serveAs(t, tt.a, tt.role, tt.scoped, r, tt.peer)
			if code != tt.want {
				t.Fatalf("status %d, want %d", code, tt.want)
			}
			if !reflect.DeepEqual(who, tt.who) {
				t.Errorf("principal %+v, want %+v", who, tt.who)
			}
		})
	}
}

// TestProxyDefaultRoleIsLogged: what a user outside every mapped group gets
// is said at start, a warning unless it is nothing.
func TestProxyDefaultRoleIsLogged(t *testing.T) {
	for _, tt := range []struct {
		role, want string
	}{
		{"", `level=INFO msg="proxy users in no group of --auth.proxy-group-role are refused (--auth.proxy-default-role=none)"`},
		{"viewer", `level=WARN msg="proxy users in no group of --auth.proxy-group-role get a role anyway`},
	} {
		var buf bytes.Buffer
		cfg := Config{Mode: ModeProxy, ProxyCIDRs: PrefixList{netip.MustParsePrefix("10.0.0.5/32")}, ProxyDefaultRole: tt.role}
		if _, err := New(nil, cfg, slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), tt.want) || (tt.role != "" && !strings.Contains(buf.String(), "role="+tt.role)) {
			t.Errorf("default role %q: log %q, want %q", tt.role, buf.String(), tt.want)
		}
	}
}

func TestModeNone(t *testing.T) {
	a, err := New(nil, Config{Mode: ModeNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, who := serveAs(t, a, RoleAdmin, false, httptest.NewRequest("DELETE", "/api/v1/tokens/1", nil), "")
	if code != 200 || who.Role != RoleAdmin || who.Via != ViaNone {
		t.Errorf("mode none: %d %+v", code, who)
	}
}

func TestRequireAnswers(t *testing.T) {
	a, err := New(nil, Config{Mode: ModeNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.Require("", false)(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/x", nil))
	if rec.Code != 500 {
		t.Errorf("a route without a role: %d, want 500", rec.Code)
	}
	tok, err := New(nil, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Basic YWxpY2U6cHc=", "Bearer not-a-token", "Bearer nbs_tooshort"} {
		r := httptest.NewRequest("GET", "/api/v1/nodes", nil)
		r.Header.Set("Authorization", h)
		rec := httptest.NewRecorder()
		tok.Require(RoleViewer, true)(http.NotFoundHandler()).ServeHTTP(rec, r)
		var body httpjson.ErrorBody
		if rec.Code != 401 || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code != "unauthorized" ||
			rec.Header().Get("WWW-Authenticate") != `Bearer realm="nbs"` {
			t.Errorf("%q: %d %s %v", h, rec.Code, rec.Body, rec.Header())
		}
	}
}
