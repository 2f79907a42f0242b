package access

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// A trusted reverse proxy (--auth.mode=proxy) names the user in a header
// and lists the user's groups in another; --auth.proxy-group-role maps
// groups to roles. Only a TCP peer in --auth.proxy-cidrs is believed.

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

// GroupRole is one --auth.proxy-group-role mapping.
type GroupRole struct {
	Group    string
	Role     Role
	Selector Selector // customers only
}

// GroupRoles is a flag.Value of repeated GROUP=ROLE mappings. Commas are not
// separators here: a customer's selector contains them.
type GroupRoles []GroupRole

func (g *GroupRoles) String() string {
	parts := make([]string, len(*g))
	for i, m := range *g {
		parts[i] = m.Group + "=" + string(m.Role)
		if m.Role == RoleCustomer {
			parts[i] += ":" + m.Selector.String()
		}
	}
	return strings.Join(parts, " ")
}

func (g *GroupRoles) Set(v string) error {
	group, spec, ok := strings.Cut(v, "=")
	group = strings.TrimSpace(group)
	if !ok || group == "" || len(group) > 256 {
		return fmt.Errorf("%q is not GROUP=ROLE", v)
	}
	roleS, selS, hasSel := strings.Cut(spec, ":")
	role, err := ParseRole(strings.TrimSpace(roleS))
	if err != nil {
		return fmt.Errorf("group %s: %w", group, err)
	}
	m := GroupRole{Group: group, Role: role}
	switch {
	case role == RoleCustomer && !hasSel:
		return fmt.Errorf("group %s: a customer needs a selector, e.g. %s=customer:customer=acme", group, group)
	case role == RoleCustomer:
		if m.Selector, err = ParseSelector(selS); err != nil {
			return fmt.Errorf("group %s: %w", group, err)
		}
		if len(m.Selector) == 0 {
			return fmt.Errorf("group %s: a customer needs a non-empty selector", group)
		}
	case hasSel:
		return fmt.Errorf("group %s: only a customer takes a selector", group)
	}
	for _, o := range *g {
		if o.Group == group {
			return fmt.Errorf("group %s is mapped twice", group)
		}
	}
	*g = append(*g, m)
	return nil
}
