package nodeauth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
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

func TestIdentityMapLabels(t *testing.T) {
	m, err := ParseIdentityMap([]byte("pool-eu.example.net eu-* customer=acme region=eu\ngw.example.net edge-1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e := m["pool-eu.example.net"]; !slices.Equal(e.Names, []string{"eu-*"}) || e.Labels["customer"] != "acme" || e.Labels["region"] != "eu" {
		t.Errorf("pool-eu entry: %+v; want eu-* bound to customer=acme,region=eu", e)
	}
	if !m.Allows("pool-eu.example.net", "eu-web-1") || m.Allows("pool-eu.example.net", "customer=acme") {
		t.Error("labels must bind, not name nodes")
	}
	if e := m["gw.example.net"]; e.Labels != nil {
		t.Errorf("gw entry binds %v; want nothing", e.Labels)
	}
	for _, b := range []struct{ text, want string }{
		{"id customer=acme\n", "names no node"},
		{"id n1 Customer=acme\n", `label "Customer=acme"`},
		{"id n1 customer=\n", "the value must be 1 to"},
		{"id n1 customer=acme\nid n2 customer=globex\n", "binds customer to both"},
	} {
		if _, err := ParseIdentityMap([]byte(b.text)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ParseIdentityMap(%q) = %v, want an error containing %q", b.text, err, b.want)
		}
	}
}

func TestCertTenant(t *testing.T) {
	uri := func(ss ...string) *x509.Certificate {
		c := &x509.Certificate{}
		for _, s := range ss {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			c.URIs = append(c.URIs, u)
		}
		return c
	}
	cases := []struct {
		name    string
		cert    *x509.Certificate
		want    string
		wantErr string
	}{
		{"none", uri(), "", ""},
		{"another URI", uri("spiffe://example.org/ns/nbs"), "", ""},
		{"a tenant", uri("urn:nbs:tenant:acme"), "acme", ""},
		{"the same tenant twice", uri("urn:nbs:tenant:acme", "urn:nbs:tenant:acme"), "acme", ""},
		{"two tenants", uri("urn:nbs:tenant:acme", "urn:nbs:tenant:globex"), "", "two tenants"},
		{"an empty tenant", uri("urn:nbs:tenant:"), "", "does not name a tenant"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CertTenant(c.cert)
			if got != c.want || (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("CertTenant = %q, %v; want %q, error containing %q", got, err, c.want, c.wantErr)
			}
		})
	}
}
