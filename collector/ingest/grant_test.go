package ingest

import (
	"maps"
	"testing"
)

func TestGrantApply(t *testing.T) {
	cases := []struct {
		name          string
		grant         Grant
		hello         map[string]string
		want, claimed map[string]string
	}{
		{"nothing bound or protected: the agent's labels",
			Grant{}, map[string]string{"customer": "acme", "rack": "r1"},
			map[string]string{"customer": "acme", "rack": "r1"}, nil},
		{"bound tenant agrees",
			Grant{Bound: map[string]string{"customer": "acme"}, Protected: []string{"customer"}}, map[string]string{"customer": "acme", "rack": "r1"},
			map[string]string{"customer": "acme", "rack": "r1"}, nil},
		{"a claim of another tenant is replaced and recorded",
			Grant{Bound: map[string]string{"customer": "acme"}, Protected: []string{"customer"}}, map[string]string{"customer": "globex", "rack": "r1"},
			map[string]string{"customer": "acme", "rack": "r1"}, map[string]string{"customer": "globex"}},
		{"a protected key without a binding is removed",
			Grant{Protected: []string{"customer"}}, map[string]string{"customer": "globex", "rack": "r1"},
			map[string]string{"rack": "r1"}, map[string]string{"customer": "globex"}},
		{"a bound label the agent does not send is added",
			Grant{Bound: map[string]string{"customer": "acme", "region": "eu"}, Protected: []string{"customer"}}, nil,
			map[string]string{"customer": "acme", "region": "eu"}, nil},
		{"a bound non-tenant label wins too",
			Grant{Bound: map[string]string{"region": "eu"}, Protected: []string{"customer"}}, map[string]string{"region": "us", "rack": "r1"},
			map[string]string{"region": "eu", "rack": "r1"}, map[string]string{"region": "us"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hello := maps.Clone(c.hello)
			got, claimed := c.grant.Apply(c.hello)
			if !maps.Equal(got, c.want) || !maps.Equal(claimed, c.claimed) {
				t.Errorf("Apply(%v) = %v, claimed %v; want %v, claimed %v", c.hello, got, claimed, c.want, c.claimed)
			}
			if !maps.Equal(hello, c.hello) {
				t.Errorf("Apply changed the Hello's labels: %v, was %v", c.hello, hello)
			}
		})
	}
}
