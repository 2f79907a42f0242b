package access

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestClientAddress: X-Forwarded-For names the client only when the TCP
// peer is a proxy the operator trusts, and then only as far as the trusted
// proxies wrote it: whatever a client sends itself is never believed.
func TestClientAddress(t *testing.T) {
	trusting, err := New(nil, Config{TrustedProxies: PrefixList{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	proxyMode, err := New(nil, Config{Mode: ModeProxy, ProxyCIDRs: PrefixList{netip.MustParsePrefix("10.9.0.1/32")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(nil, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		a      *Access
		peer   string // recorded by ConnContext; "" none
		remote string // RemoteAddr
		xff    []string
		want   string
	}{
		{"no trusted proxies: the peer, whatever the header says", plain, "192.0.2.7:5000", "192.0.2.7:5000", []string{"203.0.113.1"}, "192.0.2.7"},
		{"a spoofing client outside the trusted proxies", trusting, "192.0.2.7:5000", "192.0.2.7:5000", []string{"10.0.0.1"}, "192.0.2.7"},
		{"a rewritten RemoteAddr does not count", trusting, "192.0.2.7:5000", "10.0.0.3:1", []string{"203.0.113.1"}, "192.0.2.7"},
		{"a trusted proxy names the client", trusting, "10.0.0.3:41000", "10.0.0.3:41000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"what the client prepended is ignored", trusting, "10.0.0.3:41000", "10.0.0.3:41000", []string{"198.51.100.66, 203.0.113.9"}, "203.0.113.9"},
		{"a chain of trusted proxies is walked from the right", trusting, "10.0.0.3:41000", "10.0.0.3:41000", []string{"198.51.100.66", "203.0.113.9, 10.0.0.8"}, "203.0.113.9"},
		{"all hops trusted: the leftmost", trusting, "10.0.0.3:41000", "10.0.0.3:41000", []string{"10.0.0.9, 10.0.0.8"}, "10.0.0.9"},
		{"garbage stops the walk at the last known hop", trusting, "10.0.0.3:41000", "10.0.0.3:41000", []string{"203.0.113.9, bogus, 10.0.0.8"}, "10.0.0.8"},
		{"no header from a trusted proxy: the proxy", trusting, "10.0.0.3:41000", "10.0.0.3:41000", nil, "10.0.0.3"},
		{"ports and brackets", trusting, "[fd00::1]:443", "[fd00::1]:443", []string{"[2001:db8::5]:1234"}, "2001:db8::5"},
		{"IPv4 with a port", trusting, "10.0.0.3:41000", "10.0.0.3:41000", []string{"203.0.113.9:5555"}, "203.0.113.9"},
		{"a v4-mapped peer is its v4 address", trusting, "[::ffff:10.0.0.3]:41000", "", []string{"203.0.113.9"}, "203.0.113.9"},
		{"the proxy-mode proxy is trusted too", proxyMode, "10.9.0.1:41000", "10.9.0.1:41000", []string{"203.0.113.4"}, "203.0.113.4"},
		{"no ConnContext: RemoteAddr", plain, "", "192.0.2.8:9", []string{"203.0.113.1"}, "192.0.2.8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api/v1/nodes", nil)
			r.RemoteAddr = tt.remote
			if tt.peer != "" {
				r = r.WithContext(context.WithValue(r.Context(), peerKey, tt.peer))
			}
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := addrString(tt.a.resolveClient(r)); got != tt.want {
				t.Errorf("client %q, want %q", got, tt.want)
			}
			// Guard resolves it once for everything after it.
			var seen string
			tt.a.Guard(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = addrString(tt.a.client(r)) })).
				ServeHTTP(httptest.NewRecorder(), r)
			if seen != tt.want {
				t.Errorf("behind Guard: client %q, want %q", seen, tt.want)
			}
		})
	}
}
