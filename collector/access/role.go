// Package access is who may do what on the collector's HTTP side: API tokens
// with roles, browser sessions made from them, a trusted reverse proxy's user
// header, the middleware that enforces a route's role, the customer scope
// that hides other tenants' nodes, the browser protections (same-origin,
// content type, Host allow-list, security headers) and the audit log.
//
// A route declares the role it needs and whether it is scoped to nodes; Require
// turns that into a middleware. Handlers of scoped routes filter with the
// caller's Principal (FromContext): Sees for one node, LabelClause in SQL.
package access

import "fmt"

// Role is what a person may do. Viewer, operator and admin are ranked, each
// allowed everything of the one below; a customer reads only routes scoped
// to nodes, and only the nodes its selector matches.
type Role string

const (
	// RolePublic marks a route anyone may call (login, logout); it is a
	// route's requirement, never a principal's role.
	RolePublic Role = "public"
	// RoleCustomer as a route's requirement admits anyone signed in,
	// customers included (whoami).
	RoleCustomer Role = "customer"
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
)

// rank orders roles; 0 is not a role.
func (r Role) rank() int {
	switch r {
	case RoleCustomer:
		return 1
	case RoleViewer:
		return 2
	case RoleOperator:
		return 3
	case RoleAdmin:
		return 4
	}
	return 0
}

// ParseRole accepts a role a token or a person can hold.
func ParseRole(s string) (Role, error) {
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", fmt.Errorf("role %q must be viewer, operator, admin or customer", s)
}

// verdict is what Require does with a request.
type verdict int

const (
	allow verdict = iota
	unauthenticated
	forbidden
	hidden    // answered 404: a customer must not learn the route exists
	misrouted // the route names no role: a wiring bug, refused with 500
)

// decide applies a route's requirement to a principal. A customer passes a
// viewer route only when the route filters by node; everywhere else it is
// told "not found", so its view of the API has no doors it cannot open.
func decide(p Principal, required Role, scoped bool) verdict {
	if required == RolePublic {
		return allow
	}
	if required.rank() == 0 {
		return misrouted
	}
	if p.Role.rank() == 0 {
		return unauthenticated
	}
	if p.Role == RoleCustomer {
		if required == RoleCustomer || (required == RoleViewer && scoped) {
			return allow
		}
		return hidden
	}
	if p.Role.rank() >= required.rank() {
		return allow
	}
	return forbidden
}
