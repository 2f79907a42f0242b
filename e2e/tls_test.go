package e2e

import (
	"context"
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
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	agentapp "github.com/nbs-project/nbs/agent/app"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

func newCA(t *testing.T, name string) *testCA {
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
	ca := &testCA{cert: cert, key: key, dir: t.TempDir()}
	writePEM(t, filepath.Join(ca.dir, "ca.pem"), "CERTIFICATE", der)
	return ca
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate signed by the CA and its key; it returns their paths.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// With mutual TLS, an agent holding a certificate from the fleet's CA
// streams as usual; a client without one, with one from another CA, or
// without TLS at all is refused before it can say anything.
func TestMutualTLSStream(t *testing.T) {
	t.Parallel()
	ca, other := newCA(t, "nbs-fleet-ca"), newCA(t, "someone-else")
	serverCert, serverKey := ca.issue(t, "collector", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	// The certificate names the node: under mutual TLS it may report as no other.
	agentCert, agentKey := ca.issue(t, "tls-agent", x509.ExtKeyUsageClientAuth)
	rogueCert, rogueKey := other.issue(t, "rogue", x509.ExtKeyUsageClientAuth)
	caFile := filepath.Join(ca.dir, "ca.pem")

	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) {
		c.Ingest.TLSCertFile, c.Ingest.TLSKeyFile, c.Ingest.ClientCAFile = serverCert, serverKey, caFile
	})
	startAgent(t, "tls-agent", "", col.grpcAddr, func(c *agentapp.Config) {
		c.BPF = false
		c.CollectorCA, c.CollectorCert, c.CollectorKey = caFile, agentCert, agentKey
	})
	waitNode(t, col, "tls-agent")

	tlsWith := func(cert, key string) grpc.DialOption {
		roots := x509.NewCertPool()
		roots.AddCert(ca.cert)
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if cert != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	}
	cases := []struct {
		name string
		dial grpc.DialOption
	}{
		{"no client certificate", tlsWith("", "")},
		{"certificate from another CA", tlsWith(rogueCert, rogueKey)},
		{"plaintext", grpc.WithTransportCredentials(insecure.NewCredentials())},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := grpc.NewClient(col.grpcAddr, c.dial)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = func() error {
				stream, err := nbsv1.NewAgentServiceClient(conn).Connect(ctx)
				if err != nil {
					return err
				}
				if err := stream.Send(hello("intruder")); err != nil {
					_, err = stream.Recv()
					return err
				}
				_, err = stream.Recv()
				return err
			}()
			if err == nil {
				t.Fatal("the collector accepted the stream")
			}
			t.Logf("refused: %v", err)
		})
	}
	var nodes struct {
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
	}
	col.getJSON(t, "/api/v1/nodes", &nodes)
	for _, n := range nodes.Nodes {
		if n.Name == "intruder" {
			t.Error("a refused client registered a node")
		}
	}
}
