package access

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
)

// Guard is the outermost middleware of the HTTP side: the client's address
// (client.go), security headers on every response, the Host allow-list,
// and for every request that can
// change something (not GET, HEAD or OPTIONS) a same-origin check and a
// JSON body. Health and metrics answer any Host, so probes and scrapers
// that address the collector by IP keep working.
func (a *Access) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(withClient(r.Context(), a.resolveClient(r)))
		setSecurityHeaders(w.Header(), r, a.csp)
		if !opsPath(r.URL.Path) && !a.hostAllowed(r.Host) {
			if len(a.cfg.AllowedHosts) == 0 && a.cfg.Mode == ModeNone {
				writeError(w, r, fmt.Errorf("host %q is not one this NBS answers to: with --auth.mode=none (everyone is admin) it answers only loopback names (localhost, 127.0.0.0/8, [::1]), against DNS rebinding; name the others in --web.allowed-hosts: %w", r.Host, ErrForbidden), a.log)
				return
			}
			writeError(w, r, fmt.Errorf("host %q is not one this NBS answers to (--web.allowed-hosts): %w", r.Host, ErrForbidden), a.log)
			return
		}
		if !safeMethod(r.Method) {
			if err := a.cop.Check(r); err != nil {
				writeError(w, r, fmt.Errorf("cross-origin %s refused: changes must come from the NBS UI's own origin: %w", r.Method, ErrForbidden), a.log)
				return
			}
			if err := checkContentType(r); err != nil {
				writeError(w, r, err, a.log)
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

// errUnsupportedMedia answers 415.
type errUnsupportedMedia struct{ got string }

func (e errUnsupportedMedia) Error() string {
	if e.got == "" {
		return "a request body needs Content-Type: application/json"
	}
	return fmt.Sprintf("Content-Type %q is not accepted: send application/json", e.got)
}

// checkContentType requires JSON of every body. A form or text/plain body
// is what a cross-site page can send without asking; a request without a
// body and without a Content-Type (DELETE, logout) has nothing to mistake.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return errUnsupportedMedia{got: ct}
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

func setSecurityHeaders(h http.Header, r *http.Request, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.TLS != nil {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
}

var inlineScriptRE = regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script\s*>`)

// ContentSecurityPolicy is the policy for the UI built from indexHTML: only
// this origin's scripts, styles, images and connections, plus the inline
// scripts of index.html (the theme applied before first paint) by hash, so
// an injected script cannot run. Inline styles are not allowed either: the
// UI (Preact's style props, uPlot) sets styles through the CSSOM, which a
// policy does not restrict. The favicon is a data: URL.
func ContentSecurityPolicy(indexHTML []byte) string {
	scripts := []string{"'self'"}
	for _, m := range inlineScriptRE.FindAllSubmatch(indexHTML, -1) {
		if strings.Contains(strings.ToLower(string(m[1])), "src=") {
			continue
		}
		sum := sha256.Sum256(m[2])
		scripts = append(scripts, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	return "default-src 'self'; script-src " + strings.Join(scripts, " ") +
		"; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'" +
		"; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}
