package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigErrorsSayWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"server without key", second(Server("cert.pem", "", "", nil)), "both a certificate and a key"},
		{"server cert missing", second(Server(filepath.Join(dir, "no.pem"), filepath.Join(dir, "no-key.pem"), "", nil)), "load TLS certificate"},
		{"client CA missing", second(Client(filepath.Join(dir, "none.pem"), "", "", "", nil)), "read CA file"},
		{"client CA not PEM", second(Client(notPEM, "", "", "", nil)), "holds no PEM certificate"},
		{"client cert without key", second(Client("", "agent.pem", "", "", nil)), "both a certificate and a key"},
		{"client cert missing", second(Client("", filepath.Join(dir, "no.pem"), filepath.Join(dir, "no-key.pem"), "", nil)), "load TLS certificate"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	if cfg, err := Client("", "", "", "collector.example", nil); err != nil || cfg.ServerName != "collector.example" || cfg.RootCAs != nil {
		t.Errorf("system roots with a server name: %+v, %v", cfg, err)
	}
}

func second[T any](_ T, err error) error { return err }

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate for name (as CN and DNS SAN) and its key.
func (c *ca) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// replace writes a file the way rotation tools do (beside it, then a
// rename), with a distinct mtime so the test does not lean on its resolution.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	mt := time.Now().Add(time.Duration(len(data)) * time.Millisecond)
	if err := os.Chtimes(tmp, mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// handshake connects a client to a server over a pipe and returns what each
// side saw of the other: the server's certificate name, the client's (""
// without one), or the first error.
func handshake(t *testing.T, server, client *tls.Config) (serverName, clientName string, err error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv, cl := tls.Server(a, server), tls.Client(b, client)
	errc := make(chan error, 1)
	go func() {
		err := srv.Handshake()
		if err == nil {
			_, err = srv.Write([]byte{1})
		}
		errc <- err
	}()
	// TLS 1.3 clients finish their handshake before the server has checked
	// their certificate: reading the server's byte surfaces its verdict.
	cerr := cl.Handshake()
	if cerr == nil {
		_, cerr = cl.Read(make([]byte, 1))
	}
	a.Close() // unblocks a server writing an alert nobody reads
	serr := <-errc
	if cerr != nil {
		return "", "", cerr
	}
	if serr != nil {
		return "", "", serr
	}
	serverName = cl.ConnectionState().PeerCertificates[0].Subject.CommonName
	if pc := srv.ConnectionState().PeerCertificates; len(pc) > 0 {
		clientName = pc[0].Subject.CommonName
	}
	return serverName, clientName, nil
}

// Rotated files are used by the next handshake, without building a new
// config: the collector's certificate, the CA it accepts agents from, and
// the agent's client certificate. Files that do not load leave the old ones
// in use.
func TestCertificatesReloadWhenTheirFilesChange(t *testing.T) {
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	fleet, next := newCA(t, "fleet"), newCA(t, "next-fleet")
	// The agent trusts both CAs for the collector, so the collector's
	// certificate can move from one to the other.
	if err := os.WriteFile(path("roots.pem"), append(append([]byte{}, fleet.pem...), next.pem...), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) { replace(t, path(name), data) }
	cert, key := fleet.issue(t, "collector-1", x509.ExtKeyUsageServerAuth)
	write("server.pem", cert)
	write("server-key.pem", key)
	write("client-ca.pem", fleet.pem)
	cert, key = fleet.issue(t, "node-1", x509.ExtKeyUsageClientAuth)
	write("agent.pem", cert)
	write("agent-key.pem", key)

	server, err := Server(path("server.pem"), path("server-key.pem"), path("client-ca.pem"), nil)
	if err != nil {
		t.Fatal(err)
	}
	client, err := Client(path("roots.pem"), path("agent.pem"), path("agent-key.pem"), "collector-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step, wantServer, wantClient, wantErr string) {
		t.Helper()
		cl := client.Clone()
		cl.ServerName = wantServer
		if wantServer == "" {
			cl.ServerName = "collector-1"
		}
		s, c, err := handshake(t, server, cl)
		switch {
		case wantErr != "":
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s: handshake error %v, want one containing %q", step, err, wantErr)
			}
		case err != nil:
			t.Errorf("%s: handshake: %v", step, err)
		case s != wantServer || c != wantClient:
			t.Errorf("%s: server presented %q and client %q, want %q and %q", step, s, c, wantServer, wantClient)
		}
	}
	check("start", "collector-1", "node-1", "")

	cert, key = next.issue(t, "collector-2", x509.ExtKeyUsageServerAuth)
	write("server.pem", cert)
	check("server certificate replaced before its key", "collector-1", "node-1", "")
	write("server-key.pem", key)
	check("server certificate and key replaced", "collector-2", "node-1", "")

	cert, key = fleet.issue(t, "node-1b", x509.ExtKeyUsageClientAuth)
	write("agent-key.pem", key)
	write("agent.pem", cert)
	check("agent certificate replaced", "collector-2", "node-1b", "")

	cert, key = next.issue(t, "node-1c", x509.ExtKeyUsageClientAuth)
	write("agent-key.pem", key)
	write("agent.pem", cert)
	check("agent certificate from a CA the collector does not accept yet", "collector-2", "", "certificate")
	write("client-ca.pem", next.pem)
	check("client CA replaced", "collector-2", "node-1c", "")

	write("client-ca.pem", []byte("not a certificate"))
	check("client CA broken: the previous CA stays", "collector-2", "node-1c", "")
}
