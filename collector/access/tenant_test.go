package access

import (
	"net/http"
	"strings"
	"testing"
)

// A customer's scope must name the tenant label: a token asking for
// anything else is refused, and a customer token stored before the rule
// (or before --tenant.label changed) stops working with a message saying
// what to do, rather than seeing by labels its nodes' agents chose.
func TestCustomerScopeMustNameTheTenant(t *testing.T) {
	pool := testPool(t)
	a, _ := newTestAccess(t, pool, Config{Tenant: "tenant"})
	if _, _, err := a.CreateToken(asCLI(), NewToken{Name: "by-rack", Role: RoleCustomer, Selector: Selector{"rack": "r1"}}); err == nil ||
		!strings.Contains(err.Error(), `must name the tenant label "tenant"`) {
		t.Errorf("a customer token selecting rack only: %v; want refused, naming the tenant label", err)
	}
	if _, _, err := a.CreateToken(asCLI(), NewToken{Name: "by-customer", Role: RoleCustomer, Selector: Selector{"customer": "acme"}}); err == nil {
		t.Error("a customer token on customer= was made where the tenant label is tenant")
	}
	good, _, err := a.CreateToken(asCLI(), NewToken{Name: "acme", Role: RoleCustomer, Selector: Selector{"tenant": "acme", "region": "eu"}})
	if err != nil {
		t.Fatal(err)
	}
	// As if made by an older collector: the same scope on a key that is
	// not the tenant label now.
	old, _, err := a.CreateToken(asCLI(), NewToken{Name: "legacy", Role: RoleCustomer, Selector: Selector{"tenant": "globex"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(asCLI(), `UPDATE access_tokens SET selector = '{"region":"eu"}' WHERE name = 'legacy'`); err != nil {
		t.Fatal(err)
	}
	srv := testServer(t, a, pool, false)
	client{t: t, srv: srv, bearer: good}.want(http.MethodGet, "/api/v1/nodes", nil, http.StatusOK)
	b := client{t: t, srv: srv, bearer: old}.want(http.MethodGet, "/api/v1/nodes", nil, http.StatusUnauthorized)
	if !strings.Contains(string(b), `does not name the tenant label \"tenant\"`) {
		t.Errorf("a legacy customer token's refusal: %s; want it to name the tenant label", b)
	}
	// A proxy group mapped to a customer must name it too.
	var roles GroupRoles
	if err := roles.Set("acme-staff=customer:region=eu"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tenant: "tenant", Mode: ModeProxy, ProxyGroupRoles: roles}.withDefaults()
	if err := (&cfg).Validate(); err == nil || !strings.Contains(err.Error(), `must name the tenant label "tenant"`) {
		t.Errorf("a proxy customer group selecting region only: %v", err)
	}
}
