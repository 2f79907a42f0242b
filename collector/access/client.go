package access

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
)

// The client's address is what the audit log records, what a session
// remembers and what the failed sign-in limit counts by. It is the TCP
// peer, unless that peer is a proxy the operator trusts
// (--web.trusted-proxies, or --auth.proxy-cidrs): then X-Forwarded-For
// names the client, read from the right, past every trusted hop, so a
// client cannot put an address of its choosing there — only the proxies
// append to the header, and everything left of the first hop they did not
// append is the client's own word.

// clientKey holds the client address Guard resolved for the request.
type clientKey struct{}

// withClient records the request's client address, for Audit and Login.
func withClient(ctx context.Context, addr netip.Addr) context.Context {
	return context.WithValue(ctx, clientKey{}, addr)
}

// clientFrom returns the client address a request's context carries.
func clientFrom(ctx context.Context) (netip.Addr, bool) {
	a, ok := ctx.Value(clientKey{}).(netip.Addr)
	return a, ok
}

// client returns the request's client address: the one Guard resolved,
// else resolved now (a handler wired without Guard).
func (a *Access) client(r *http.Request) netip.Addr {
	if addr, ok := clientFrom(r.Context()); ok {
		return addr
	}
	return a.resolveClient(r)
}

// resolveClient finds the client address of a request; the zero Addr when
// even the peer is unknown.
func (a *Access) resolveClient(r *http.Request) netip.Addr {
	// The peer ConnContext recorded is the TCP connection's; RemoteAddr is
	// the same unless a middleware rewrote it, and serves a server wired
	// without ConnContext (tests).
	raw, ok := peerFrom(r.Context())
	if !ok {
		raw = r.RemoteAddr
	}
	peer, ok := parseHop(raw)
	if !ok || !a.trustedProxy(peer) {
		return peer
	}
	hops := forwardedFor(r.Header)
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		h, ok := parseHop(hops[i])
		if !ok {
			// Garbage where an address should be: the last hop that is
			// known is as far as anything can be believed.
			break
		}
		client = h
		if !a.trustedProxy(h) {
			break
		}
	}
	return client
}

// trustedProxy reports whether X-Forwarded-For from addr is believed.
func (a *Access) trustedProxy(addr netip.Addr) bool {
	return a.cfg.TrustedProxies.Contains(addr) || a.cfg.ProxyCIDRs.Contains(addr)
}

// forwardedFor lists the hops of every X-Forwarded-For header, in order.
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		for hop := range strings.SplitSeq(v, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}

// parseHop reads an address as proxies and net/http write it: bare
// (192.0.2.1, 2001:db8::1), with a port (192.0.2.1:443, [2001:db8::1]:443)
// or bracketed without one.
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if t, ok := strings.CutPrefix(s, "["); ok {
		if a, err := netip.ParseAddr(strings.TrimSuffix(t, "]")); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// addrString is how the audit log and sessions write a client address.
func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
