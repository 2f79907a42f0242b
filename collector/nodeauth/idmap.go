package nodeauth

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"fmt"
	"os"
	"path"
	"strings"
)

// IdentityMap lets the certificate of one identity report as other node
// names: a gateway that forwards for several hosts, or certificates issued
// per pool rather than per host. Without an entry, a certificate reports
// only as its own name.
//
// The file has one identity per line followed by the names it may claim,
// exact or as globs (path.Match: *, ?, [a-z]); '#' starts a comment:
//
//	# certificate identity     node names
//	gateway-1.example.net      edge-1 edge-2
//	pool-eu.nodes.example.net  eu-*
type IdentityMap map[string][]string

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
		for _, p := range f[1:] {
			if _, err := path.Match(p, ""); err != nil || len(p) > 253 {
				return nil, fmt.Errorf("line %d: %q is not a node name or glob (*, ?, [a-z])", n, p)
			}
		}
		m[f[0]] = append(m[f[0]], f[1:]...)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// Allows reports whether a certificate of this identity may report as node.
func (m IdentityMap) Allows(identity, node string) bool {
	for _, p := range m[identity] {
		if ok, _ := path.Match(p, node); ok {
			return true
		}
	}
	return false
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
