package nodeauth

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/nbs-project/nbs/internal/schema"
)

// IdentityMap lets the certificate of one identity report as other node
// names: a gateway that forwards for several hosts, or certificates issued
// per pool rather than per host. Without an entry, a certificate reports
// only as its own name.
//
// The file has one identity per line followed by the names it may claim,
// exact or as globs (path.Match: *, ?, [a-z]), and optionally labels
// (key=value) bound to every node that identity reports as — its tenant,
// most usefully; '#' starts a comment:
//
//	# certificate identity     node names     bound labels
//	gateway-1.example.net      edge-1 edge-2
//	pool-eu.nodes.example.net  eu-*           customer=acme
type IdentityMap map[string]IdentityEntry

// IdentityEntry is what one certificate identity may report as, and the
// labels bound to those nodes.
type IdentityEntry struct {
	Names  []string
	Labels map[string]string
}

const maxIdentityMapBytes = 1 << 20

// LoadIdentityMap reads and checks an identity map file.
func LoadIdentityMap(file string) (IdentityMap, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read node identity map: %w", err)
	}
	m, err := ParseIdentityMap(b)
	if err != nil {
		return nil, fmt.Errorf("node identity map %s: %w", file, err)
	}
	return m, nil
}

// ParseIdentityMap parses the map's text; an error names the line.
func ParseIdentityMap(b []byte) (IdentityMap, error) {
	if len(b) > maxIdentityMapBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(b), maxIdentityMapBytes)
	}
	m := IdentityMap{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxIdentityMapBytes)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) == 1 {
			return nil, fmt.Errorf("line %d: %q names no node: want an identity followed by node names or globs", n, f[0])
		}
		if len(f[0]) > 253 {
			return nil, fmt.Errorf("line %d: identity is longer than 253 characters", n)
		}
		// Certificate names (DNS) and node names (schema.CanonicalNodeName)
		// compare without case: the map holds both lower-cased.
		f[0] = strings.ToLower(f[0])
		e := m[f[0]]
		for _, p := range f[1:] {
			if k, v, ok := strings.Cut(p, "="); ok {
				if err := schema.CheckLabelKey(k); err != nil {
					return nil, fmt.Errorf("line %d: label %q: %v", n, p, err)
				}
				if err := schema.CheckLabelValue(v); err != nil || v == "" {
					return nil, fmt.Errorf("line %d: label %q: the value must be 1 to %d bytes of text", n, p, schema.MaxLabelValueLen)
				}
				if old, dup := e.Labels[k]; dup && old != v {
					return nil, fmt.Errorf("line %d: identity %s binds %s to both %q and %q", n, f[0], k, old, v)
				}
				if e.Labels == nil {
					e.Labels = map[string]string{}
				}
				e.Labels[k] = v
				continue
			}
			p = strings.ToLower(p)
			if _, err := path.Match(p, ""); err != nil || len(p) > 253 {
				return nil, fmt.Errorf("line %d: %q is not a node name or glob (*, ?, [a-z])", n, p)
			}
			e.Names = append(e.Names, p)
		}
		if len(e.Names) == 0 {
			return nil, fmt.Errorf("line %d: %q names no node: want an identity followed by node names or globs", n, f[0])
		}
		m[f[0]] = e
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// Allows reports whether a certificate of this identity may report as node.
func (m IdentityMap) Allows(identity, node string) bool {
	for _, p := range m[strings.ToLower(identity)].Names {
		if ok, _ := path.Match(p, strings.ToLower(node)); ok {
			return true
		}
	}
	return false
}

// tenantURIPrefix starts a client certificate's URI SAN that names the
// node's tenant: urn:nbs:tenant:acme binds the tenant label to acme.
const tenantURIPrefix = "urn:nbs:tenant:"

// CertTenant is the tenant a client certificate names in a URI SAN, ""
// when it names none; an error when it names two or an invalid one.
func CertTenant(c *x509.Certificate) (string, error) {
	tenant := ""
	for _, u := range c.URIs {
		s := u.String()
		if !strings.HasPrefix(s, tenantURIPrefix) {
			continue
		}
		v := strings.TrimPrefix(s, tenantURIPrefix)
		if v == "" || schema.CheckLabelValue(v) != nil || strings.ContainsAny(v, "/?#") {
			return "", fmt.Errorf("URI SAN %q does not name a tenant (want %s<tenant>)", s, tenantURIPrefix)
		}
		if tenant != "" && tenant != v {
			return "", fmt.Errorf("the certificate names two tenants, %q and %q", tenant, v)
		}
		tenant = v
	}
	return tenant, nil
}

// CertIdentities are the names a client certificate stands for: its DNS
// subject alternative names, or its common name when it has none (as
// hostname verification does it).
func CertIdentities(c *x509.Certificate) []string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames
	}
	if c.Subject.CommonName != "" {
		return []string{c.Subject.CommonName}
	}
	return nil
}
