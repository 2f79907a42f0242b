package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

// TestRunServesHTTPSWithABootstrapAdmin runs the collector as make run does
// (a bootstrap admin token written to a file) with HTTP TLS: the API
// answers over HTTPS only with the token, health stays open, and a restart
// replaces the token.
func TestRunServesHTTPSWithABootstrapAdmin(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, roots := selfSigned(t, dir)
	tokenFile := filepath.Join(dir, "admin-token")
	dbURL := pgcluster.Database(t)
	start := func() (string, func()) {
		t.Helper()
		cfg := DefaultConfig()
		cfg.GRPCAddr, cfg.HTTPAddr, cfg.DBURL = "127.0.0.1:0", "127.0.0.1:0", dbURL
		cfg.Access.TLSCertFile, cfg.Access.TLSKeyFile, cfg.Access.BootstrapAdminFile = certFile, keyFile, tokenFile
		c, stop := startCollector(t, cfg)
		_, addr := c.Addrs()
		return addr, stop
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "nbs.test"}}}
	get := func(url, token string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	readToken := func() string {
		t.Helper()
		fi, err := os.Stat(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", tokenFile, fi.Mode().Perm())
		}
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	addr, stop := start()
	first := readToken()
	base := "https://" + addr
	if code, _, body := get(base+"/api/v1/whoami", first); code != 200 || !strings.Contains(body, `"name": "bootstrap-admin"`) || !strings.Contains(body, `"role": "admin"`) {
		t.Errorf("whoami with the bootstrap token: %d %s", code, body)
	}
	if code, h, _ := get(base+"/api/v1/nodes", ""); code != 401 || h.Get("Strict-Transport-Security") == "" {
		t.Errorf("nodes without a token: %d, HSTS %q; want 401 with HSTS", code, h.Get("Strict-Transport-Security"))
	}
	if code, _, _ := get(base+"/healthz", ""); code != 200 {
		t.Errorf("healthz: %d", code)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("plaintext HTTP answered 200 on the TLS port")
		}
	}
	stop()

	addr, stop = start()
	defer stop()
	second := readToken()
	if second == first {
		t.Fatal("a restart kept the bootstrap token")
	}
	if code, _, _ := get("https://"+addr+"/api/v1/whoami", first); code != 401 {
		t.Errorf("the previous start's token: %d, want 401", code)
	}
	if code, _, _ := get("https://"+addr+"/api/v1/whoami", second); code != 200 {
		t.Errorf("the new token: %d, want 200", code)
	}
}

// selfSigned writes a certificate for nbs.test and 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nbs.test"},
		DNSNames: []string{"nbs.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// startCollector runs a collector of cfg until the returned stop, which
// reports how its Run ended; the test fails if it is not ready in 30 s.
func startCollector(t *testing.T, cfg Config) (*Collector, func()) {
	t.Helper()
	return startCollectorLogging(t, cfg, slog.New(slog.DiscardHandler))
}

// startCollectorLogging is startCollector logging to log.
func startCollectorLogging(t *testing.T, cfg Config, log *slog.Logger) (*Collector, func()) {
	t.Helper()
	c := New(cfg, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("collector did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("collector not ready within 30s")
	}
	return c, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector: %v", err)
		}
	}
}
