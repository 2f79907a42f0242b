package access

import "testing"

func TestDecide(t *testing.T) {
	nobody := Principal{}
	viewer := Principal{Name: "v", Role: RoleViewer}
	operator := Principal{Name: "o", Role: RoleOperator}
	admin := Principal{Name: "a", Role: RoleAdmin}
	acme := Principal{Name: "c", Role: RoleCustomer, Selector: Selector{"customer": "acme"}}
	tests := []struct {
		name     string
		p        Principal
		required Role
		scoped   bool
		want     verdict
	}{
		{"public admits nobody", nobody, RolePublic, false, allow},
		{"public admits a customer", acme, RolePublic, false, allow},
		{"nobody on a viewer route", nobody, RoleViewer, true, unauthenticated},
		{"nobody on whoami", nobody, RoleCustomer, false, unauthenticated},
		{"viewer reads", viewer, RoleViewer, false, allow},
		{"viewer reads scoped", viewer, RoleViewer, true, allow},
		{"viewer cannot edit", viewer, RoleOperator, true, forbidden},
		{"viewer cannot manage tokens", viewer, RoleAdmin, false, forbidden},
		{"viewer on whoami", viewer, RoleCustomer, false, allow},
		{"operator edits", operator, RoleOperator, true, allow},
		{"operator reads", operator, RoleViewer, false, allow},
		{"operator cannot manage tokens", operator, RoleAdmin, false, forbidden},
		{"admin manages tokens", admin, RoleAdmin, false, allow},
		{"admin edits", admin, RoleOperator, false, allow},
		{"customer reads scoped", acme, RoleViewer, true, allow},
		{"customer on whoami", acme, RoleCustomer, false, allow},
		{"customer on an unscoped read is hidden", acme, RoleViewer, false, hidden},
		{"customer on a scoped edit is hidden", acme, RoleOperator, true, hidden},
		{"customer on tokens is hidden", acme, RoleAdmin, false, hidden},
		{"a route without a role is refused", admin, "", false, misrouted},
		{"a route with a misspelt role is refused", admin, "admins", false, misrouted},
		{"a principal with a bogus role is nobody", Principal{Name: "x", Role: "root"}, RoleViewer, false, unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(tt.p, tt.required, tt.scoped); got != tt.want {
				t.Errorf("decide(%s, %q, scoped=%v) = %d, want %d", tt.p.Role, tt.required, tt.scoped, got, tt.want)
			}
		})
	}
}

func TestParseRole(t *testing.T) {
	for _, s := range []string{"viewer", "operator", "admin", "customer"} {
		if r, err := ParseRole(s); err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "public", "Admin", "root"} {
		if _, err := ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q) accepted", s)
		}
	}
}
