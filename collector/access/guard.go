package access

import (
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"net/url"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
)

// Guard is the outermost middleware of the HTTP side: the client's address
// (client.go), security headers on every response (csp.go), the Host
// allow-list, and for every request that can change something (not GET,
// HEAD or OPTIONS) a same-origin check and a JSON body. Health and metrics answer any Host, so probes and scrapers
// that address the collector by IP keep working.
func (a *Access) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(withClient(r.Context(), a.resolveClient(r)))
		setSecurityHeaders(w.Header(), r, a.csp)
		if !opsPath(r.URL.Path) && !a.hostAllowed(r.Host) {
			if len(a.cfg.AllowedHosts) == 0 && a.cfg.Mode == ModeNone {
				httpjson.WriteError(w, r, fmt.Errorf("host %q is not one this NBS answers to: with --auth.mode=none (everyone is admin) it answers only loopback names (localhost, 127.0.0.0/8, [::1]), against DNS rebinding; name the others in --web.allowed-hosts: %w", r.Host, ErrForbidden), a.log)
				return
			}
			httpjson.WriteError(w, r, fmt.Errorf("host %q is not one this NBS answers to (--web.allowed-hosts): %w", r.Host, ErrForbidden), a.log)
			return
		}
		if !safeMethod(r.Method) {
			if err := a.cop.Check(r); err != nil {
				httpjson.WriteError(w, r, fmt.Errorf("cross-origin %s refused: changes must come from the NBS UI's own origin: %w", r.Method, ErrForbidden), a.log)
				return
			}
			if err := checkContentType(r); err != nil {
				httpjson.WriteError(w, r, err, a.log)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func opsPath(p string) bool { return p == "/healthz" || p == "/readyz" || p == "/metrics" }

// checkContentType requires JSON of every body. A form or text/plain body
// is what a cross-site page can send without asking; a request without a
// body and without a Content-Type (DELETE, logout) has nothing to mistake.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case ct == "":
		return errkind.Errorf(errkind.UnsupportedMedia, "a request body needs Content-Type: application/json")
	case err != nil || mt != "application/json":
		return errkind.Errorf(errkind.UnsupportedMedia, "Content-Type %q is not accepted: send application/json", ct)
	}
	return nil
}

// hostAllowed checks the Host header against --web.allowed-hosts and the
// external URL's host. A pattern without a port allows any port. Without
// --web.allowed-hosts every Host is answered, except under
// --auth.mode=none: there a page on any site that rebinds its name to the
// collector's address would be admin (and could mint tokens), so only
// loopback names, which no other site can take, are answered.
func (a *Access) hostAllowed(host string) bool {
	h, p := splitHost(host)
	if len(a.cfg.AllowedHosts) == 0 {
		if a.cfg.Mode != ModeNone || loopbackHost(h) {
			return true
		}
		if u, err := url.Parse(a.cfg.ExternalURL); err == nil && u.Host != "" {
			eh, ep := splitHost(u.Host)
			return eh == h && (ep == "" || ep == p)
		}
		return false
	}
	allowed := a.cfg.AllowedHosts
	if u, err := url.Parse(a.cfg.ExternalURL); err == nil && u.Host != "" {
		allowed = append(allowed[:len(allowed):len(allowed)], u.Host)
	}
	for _, pat := range allowed {
		ph, pp := splitHost(pat)
		if ph == h && (pp == "" || pp == p) {
			return true
		}
	}
	return false
}

// loopbackHost reports whether a Host (lower case, without port or
// brackets) can only name this machine: localhost, 127.0.0.0/8, ::1.
func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	addr, err := netip.ParseAddr(h)
	return err == nil && addr.Unmap().IsLoopback()
}

// origin is scheme://host of a URL, as browsers send in Origin.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host
}
