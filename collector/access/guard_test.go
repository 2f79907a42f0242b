package access

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

func newGuard(t *testing.T, cfg Config) http.Handler {
	t.Helper()
	a, err := New(nil, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
}

type req struct {
	method, path, host string
	header             map[string]string
	body               string
}

func (q req) build() *http.Request {
	r := httptest.NewRequest(q.method, "http://nbs.example.com"+q.path, strings.NewReader(q.body))
	if q.body == "" {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	if q.host != "" {
		r.Host = q.host
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	return r
}

func TestGuard(t *testing.T) {
	json := map[string]string{"Content-Type": "application/json"}
	sameOrigin := map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}
	none := Config{Mode: ModeNone}
	tests := []struct {
		name     string
		cfg      Config
		req      req
		want     int
		wantCode string
	}{
		{"GET passes", Config{}, req{method: "GET", path: "/api/v1/nodes"}, 200, ""},
		{"GET cross-site passes (reads are safe)", Config{}, req{method: "GET", path: "/", header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 200, ""},
		{"JSON POST from the UI", Config{}, req{method: "POST", path: "/api/v1/thresholds", header: sameOrigin, body: "{}"}, 200, ""},
		{"JSON POST from curl (no browser headers)", Config{}, req{method: "POST", path: "/api/v1/thresholds", header: json, body: "{}"}, 200, ""},
		{"JSON with charset", Config{}, req{method: "PUT", path: "/x", header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, body: "{}"}, 200, ""},
		{"text/plain POST is refused", Config{}, req{method: "POST", path: "/api/v1/thresholds", header: map[string]string{"Content-Type": "text/plain"}, body: "{}"}, 415, "unsupported_media_type"},
		{"form POST is refused", Config{}, req{method: "POST", path: "/api/v1/login", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "token=x"}, 415, "unsupported_media_type"},
		{"an empty form POST is refused", Config{}, req{method: "POST", path: "/api/v1/logout", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, "unsupported_media_type"},
		{"a body without Content-Type is refused", Config{}, req{method: "POST", path: "/x", body: "{}"}, 415, "unsupported_media_type"},
		{"bodiless DELETE needs no Content-Type", Config{}, req{method: "DELETE", path: "/api/v1/thresholds/3", header: map[string]string{"Sec-Fetch-Site": "same-origin"}}, 200, ""},
		{"cross-site POST is refused", Config{}, req{method: "POST", path: "/x", header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, body: "{}"}, 403, "forbidden"},
		{"same-site (another subdomain) POST is refused", Config{}, req{method: "POST", path: "/x", header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, body: "{}"}, 403, "forbidden"},
		{"cross-site bodiless DELETE is refused", Config{}, req{method: "DELETE", path: "/x", header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, "forbidden"},
		{"foreign Origin without Sec-Fetch-Site is refused", Config{}, req{method: "POST", path: "/x", header: map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, body: "{}"}, 403, "forbidden"},
		{"own Origin without Sec-Fetch-Site passes", Config{}, req{method: "POST", path: "/x", header: map[string]string{"Content-Type": "application/json", "Origin": "http://nbs.example.com"}, body: "{}"}, 200, ""},
		{"the external URL's origin passes behind a proxy that rewrites Host", Config{ExternalURL: "https://nbs.example.com"},
			req{method: "POST", path: "/x", host: "10.0.0.7:7700", header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", "Origin": "https://nbs.example.com"}, body: "{}"}, 200, ""},
		{"any Host without an allow-list", Config{}, req{method: "GET", path: "/", host: "rebound.evil.example"}, 200, ""},
		{"allowed Host", Config{AllowedHosts: StringList{"nbs.example.com"}}, req{method: "GET", path: "/", host: "NBS.example.com:7700"}, 200, ""},
		{"allowed Host and port", Config{AllowedHosts: StringList{"127.0.0.1:7700"}}, req{method: "GET", path: "/", host: "127.0.0.1:7700"}, 200, ""},
		{"allowed IPv6 Host", Config{AllowedHosts: StringList{"::1"}}, req{method: "GET", path: "/", host: "[::1]:7700"}, 200, ""},
		{"wrong port", Config{AllowedHosts: StringList{"127.0.0.1:7700"}}, req{method: "GET", path: "/", host: "127.0.0.1:8080"}, 403, "forbidden"},
		{"DNS rebinding is refused", Config{AllowedHosts: StringList{"nbs.example.com"}}, req{method: "GET", path: "/api/v1/nodes", host: "rebound.evil.example"}, 403, "forbidden"},
		{"the external URL's host is allowed", Config{AllowedHosts: StringList{"localhost"}, ExternalURL: "https://nbs.example.com"}, req{method: "GET", path: "/", host: "nbs.example.com"}, 200, ""},
		{"health answers any Host", Config{AllowedHosts: StringList{"nbs.example.com"}}, req{method: "GET", path: "/healthz", host: "10.1.2.3:7700"}, 200, ""},
		{"readiness answers any Host", Config{AllowedHosts: StringList{"nbs.example.com"}}, req{method: "GET", path: "/readyz", host: "10.1.2.3:7700"}, 200, ""},
		{"metrics answer any Host", Config{AllowedHosts: StringList{"nbs.example.com"}}, req{method: "GET", path: "/metrics", host: "10.1.2.3:7700"}, 200, ""},
		{"a 404 passes through", Config{}, req{method: "GET", path: "/missing"}, 404, ""},
		// --auth.mode=none without --web.allowed-hosts: loopback names only.
		{"mode none: localhost", none, req{method: "GET", path: "/api/v1/nodes", host: "localhost:7700"}, 200, ""},
		{"mode none: LOCALHOST.", none, req{method: "GET", path: "/", host: "LOCALHOST."}, 200, ""},
		{"mode none: 127.0.0.1", none, req{method: "GET", path: "/", host: "127.0.0.1:7700"}, 200, ""},
		{"mode none: 127.8.9.10", none, req{method: "POST", path: "/api/v1/tokens", host: "127.8.9.10", header: json, body: "{}"}, 200, ""},
		{"mode none: [::1]", none, req{method: "GET", path: "/", host: "[::1]:7700"}, 200, ""},
		{"mode none: [::ffff:127.0.0.1]", none, req{method: "GET", path: "/", host: "[::ffff:127.0.0.1]:7700"}, 200, ""},
		{"mode none: a rebound name is refused", none, req{method: "POST", path: "/api/v1/tokens", host: "rebound.evil.example", header: json, body: "{}"}, 403, "forbidden"},
		{"mode none: a name that only resolves to loopback is refused", none, req{method: "GET", path: "/", host: "localhost.evil.example"}, 403, "forbidden"},
		{"mode none: the host's own address is refused", none, req{method: "GET", path: "/", host: "10.0.0.7:7700"}, 403, "forbidden"},
		{"mode none: no Host is refused", none, req{method: "GET", path: "/", host: " "}, 403, "forbidden"},
		{"mode none: health by address", none, req{method: "GET", path: "/healthz", host: "10.0.0.7:7700"}, 200, ""},
		{"mode none: the external URL's host", Config{Mode: ModeNone, ExternalURL: "http://nbs.lab:7700"}, req{method: "GET", path: "/", host: "nbs.lab:7700"}, 200, ""},
		{"mode none: the external URL's host on another port", Config{Mode: ModeNone, ExternalURL: "http://nbs.lab:7700"}, req{method: "GET", path: "/", host: "nbs.lab:8080"}, 403, "forbidden"},
		{"mode none: --web.allowed-hosts decides", Config{Mode: ModeNone, AllowedHosts: StringList{"nbs.lab"}}, req{method: "GET", path: "/", host: "nbs.lab"}, 200, ""},
		{"mode none: --web.allowed-hosts replaces loopback", Config{Mode: ModeNone, AllowedHosts: StringList{"nbs.lab"}}, req{method: "GET", path: "/", host: "127.0.0.1"}, 403, "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			newGuard(t, tt.cfg).ServeHTTP(rec, tt.req.build())
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
			if tt.wantCode != "" {
				if !strings.Contains(rec.Body.String(), `"code": "`+tt.wantCode+`"`) || rec.Header().Get("Content-Type") != "application/json" {
					t.Errorf("body %s is not the JSON error %q", rec.Body, tt.wantCode)
				}
			}
			// Every response, refused or not, carries the headers.
			for h, want := range map[string]string{
				"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
				"Cross-Origin-Opener-Policy": "same-origin",
			} {
				if got := rec.Header().Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy = %q", csp)
			}
			if rec.Header().Get("Strict-Transport-Security") != "" {
				t.Error("HSTS on plain HTTP")
			}
		})
	}
}

// TestGuardModeNoneNamesTheFlag: a Host refused under --auth.mode=none is
// told why and what to set.
func TestGuardModeNoneNamesTheFlag(t *testing.T) {
	rec := httptest.NewRecorder()
	newGuard(t, Config{Mode: ModeNone}).ServeHTTP(rec, req{method: "GET", path: "/", host: "rebound.evil.example"}.build())
	for _, want := range []string{"--auth.mode=none", "loopback", "--web.allowed-hosts", "rebound.evil.example"} {
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("HTTP %d %s: want 403 saying %q", rec.Code, rec.Body, want)
		}
	}
}

func TestGuardHSTSOverTLS(t *testing.T) {
	r := req{method: "GET", path: "/"}.build()
	r.TLS = &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	newGuard(t, Config{}).ServeHTTP(rec, r)
	if got := rec.Header().Get("Strict-Transport-Security"); got != "max-age=31536000" {
		t.Errorf("Strict-Transport-Security = %q", got)
	}
}

func TestContentSecurityPolicy(t *testing.T) {
	html := []byte(`<html><head><script>alert(1)</script><SCRIPT type="text/javascript">
  var x = 1;
</SCRIPT><script type="module" src="/assets/index.js"></script><script src="/x.js" async></script></head></html>`)
	csp := ContentSecurityPolicy(html)
	want := "script-src 'self' 'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI=' 'sha256-lntYEl2VCmAryz6L783NtTNL3RSpQ3+Ve7enxWiEfVc='; "
	if !strings.Contains(csp, want) {
		t.Errorf("CSP %q\nlacks %q", csp, want)
	}
	for _, d := range []string{"default-src 'self'", "style-src 'self';", "img-src 'self' data:", "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("CSP %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP %q allows inline code", csp)
	}
	if got := ContentSecurityPolicy(nil); !strings.Contains(got, "script-src 'self'; ") {
		t.Errorf("without a UI: %q", got)
	}
}

// The UI's index.html has one inline script (the theme, before first
// paint); the policy must allow exactly it. Vite copies inline classic
// scripts unchanged, and the app hashes the built file, not this one.
func TestContentSecurityPolicyOfTheUI(t *testing.T) {
	html, err := os.ReadFile("../../web/index.html")
	if err != nil {
		t.Fatal(err)
	}
	hashes := regexp.MustCompile(`'sha256-[A-Za-z0-9+/=]+'`).FindAllString(ContentSecurityPolicy(html), -1)
	if len(hashes) != 1 {
		t.Errorf("web/index.html gives %d script hashes, want 1 (the theme script): %v", len(hashes), hashes)
	}
}
