package access

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
)

// Security headers go on every response (Guard): the Content-Security-Policy
// of the UI, no framing, no sniffing, no referrer, a window of its own, and
// HSTS over TLS.

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
