package nodeauth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"slices"
	"strings"
	"testing"
)

func TestIdentityMap(t *testing.T) {
	m, err := ParseIdentityMap([]byte(`
# certificate identity     node names
gateway-1.example.net      edge-1 edge-2   # two hosts behind one gateway
pool-eu.nodes.example.net  eu-*
pool-eu.nodes.example.net  legacy-[0-9]
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		identity, node string
		want           bool
	}{
		{"gateway-1.example.net", "edge-1", true},
		{"gateway-1.example.net", "edge-3", false},
		{"pool-eu.nodes.example.net", "eu-web-7", true},
		{"pool-eu.nodes.example.net", "legacy-4", true},
		{"pool-eu.nodes.example.net", "us-web-7", false},
		{"edge-1", "gateway-1.example.net", false}, // not symmetric
		{"unknown", "edge-1", false},
	}
	for _, c := range cases {
		if got := m.Allows(c.identity, c.node); got != c.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", c.identity, c.node, got, c.want)
		}
	}
	bad := []struct{ text, want string }{
		{"lonely-identity\n", "line 1: \"lonely-identity\" names no node"},
		{"# ok\nid edge-[\n", "line 2: \"edge-[\" is not a node name or glob"},
		{strings.Repeat("x", 254) + " node\n", "line 1: identity is longer than 253"},
		{strings.Repeat("#", maxIdentityMapBytes+1), "at most"},
	}
	for _, b := range bad {
		if _, err := ParseIdentityMap([]byte(b.text)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ParseIdentityMap(%.30q…) = %v, want an error containing %q", b.text, err, b.want)
		}
	}
}

func TestCertIdentitiesPreferDNSNames(t *testing.T) {
	cases := []struct {
		name string
		cert *x509.Certificate
		want []string
	}{
		{"DNS SANs win over the CN", &x509.Certificate{Subject: pkix.Name{CommonName: "cn"}, DNSNames: []string{"a", "b"}}, []string{"a", "b"}},
		{"CN without SANs", &x509.Certificate{Subject: pkix.Name{CommonName: "cn"}}, []string{"cn"}},
		{"neither", &x509.Certificate{}, nil},
	}
	for _, c := range cases {
		if got := CertIdentities(c.cert); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
