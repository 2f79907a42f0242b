package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentapp "github.com/nbs-project/nbs/agent/app"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const fleetToken = "e2e-fleet-bootstrap-token-0123456789abcdef"

func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bootstrap-token")
	if err := os.WriteFile(p, []byte(fleetToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type nodeView struct {
	Name         string            `json:"name"`
	Connected    bool              `json:"connected"`
	Labels       map[string]string `json:"labels"`
	AgentVersion string            `json:"agent_version"`
	LastReport   *time.Time        `json:"last_report"`
	Capabilities []struct {
		Name string `json:"name"`
	} `json:"capabilities"`
}

func getNode(t *testing.T, c *collector, node string) (nodeView, int) {
	t.Helper()
	var n nodeView
	code := c.getJSON(t, "/api/v1/nodes/"+node, &n)
	return n, code
}

// claim is a raw client speaking for node: a Hello with forged labels and
// version and the given proof, then a report of 777 resets. It returns nil
// when the collector accepted the Hello (its Config arrived), else how the
// stream ended.
func claim(t *testing.T, addr string, dial grpc.DialOption, node string, auth *nbsv1.NodeAuth) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := nbsv1.NewAgentServiceClient(conn).Connect(ctx)
	if err != nil {
		return err
	}
	h := hello(node)
	h.GetHello().Labels = map[string]string{"customer": "evil"}
	h.GetHello().AgentVersion = "forged"
	h.GetHello().Auth = auth
	// Sends may fail once the collector has refused; Recv has the status.
	_ = stream.Send(h)
	_ = stream.Send(report(1, sample("tcp_reset", 777), sample("tcp_reset/sent", 777)))
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if m.GetConfig() != nil {
			return nil
		}
	}
}

func credentialProof(c string) *nbsv1.NodeAuth {
	return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_NodeCredential{NodeCredential: c}}
}

func tokenProof(t string) *nbsv1.NodeAuth {
	return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_BootstrapToken{BootstrapToken: t}}
}

func wantDenied(t *testing.T, what string, err error, fragment string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), fragment) {
		t.Errorf("%s: %v; want PermissionDenied mentioning %q", what, err, fragment)
		return
	}
	t.Logf("%s: refused: %s", what, status.Convert(err).Message())
}

// unharmed checks the real node after impostors tried its name: still
// connected with its own labels and version, its reset totals exactly what
// the lab caused (sent+resets more now), and a threshold override for its
// label selector still reaches its agent, which then evaluates CRIT. It
// returns the resets caused in all.
func unharmed(t *testing.T, col *collector, lab *netlab.Lab, node string, sent int, b0 map[string]uint64) int {
	t.Helper()
	n, code := getNode(t, col, node)
	if code != http.StatusOK || !n.Connected || n.Labels["customer"] != "acme" || n.AgentVersion == "forged" {
		t.Errorf("after the impostors: HTTP %d, %+v; want the real node connected with customer=acme and its own version", code, n)
	}
	lab.ResetNoSocket(t, 5)
	sent += 5
	exact := func() string {
		for _, m := range []string{"tcp_reset/sent/no_socket", "tcp_reset/sent"} {
			if got := storedTotal(t, col, node, m); got != float64(sent) {
				return fmt.Sprintf("%s: stored %v, want %d", m, got, sent)
			}
		}
		return ""
	}
	eventually(t, withinTwoIntervals, exact)

	base := "/api/v1"
	code, body := put(t, col, base+"/thresholds", `{"scope":{"kind":"selector","selector":{"customer":"acme"}},
		"metric":"tcp_reset/sent/no_socket","threshold":{"warn":1,"crit":2,"comparison":"above","hold_intervals":1}}`)
	if code != http.StatusOK {
		t.Fatalf("PUT override: HTTP %d %s", code, body)
	}
	since := time.Now()
	var s seriesResp
	// The agent may get the override a moment after the PUT returns: cause
	// resets until an interval of them is CRIT under the new crit of 2/s
	// (the default is 10/s, which 4 resets never reach).
	deadline := time.Now().Add(withinTwoIntervals + 5*time.Second)
	crit := false
	for !crit && time.Now().Before(deadline) {
		lab.ResetNoSocket(t, 4)
		sent += 4
		end := time.Now().Add(withinTwoIntervals)
		for !crit && time.Now().Before(end) {
			col.getJSON(t, fmt.Sprintf("%s/nodes/%s/series?metric=tcp_reset/sent/no_socket&from=%d", base, node, since.Add(-interval).UnixMilli()), &s)
			for _, p := range s.Points {
				crit = crit || p.State == "crit"
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !crit {
		t.Errorf("the agent did not apply the override pushed after the impostors: %+v", s.Points)
	}
	eventually(t, withinTwoIntervals, exact)
	if d := lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"]; d != uint64(sent) {
		t.Errorf("nstat TcpOutRsts delta %d, want %d", d, sent)
	}
	return sent
}

// With enrollment over plaintext, a raw client claiming a connected,
// enrolled node's name — without proof, with the fleet's bootstrap token, or
// with a made-up credential — is refused and lands nothing: the real node
// stays connected with its labels and version, its totals stay exact, and
// it still receives config pushes.
func TestIdentityEnrollmentRefusesImpostors(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", enrollWith(tokenFile(t)))
	credFile := filepath.Join(t.TempDir(), "state", "node-credential")
	startAgent(t, "lab-b", lab.B, col.grpcAddr, acmeEnrolling(credFile, tenantTokenFile(t, col, "acme")))
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)

	raw, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatalf("the agent kept no credential: %v", err)
	}
	cred := strings.TrimSpace(string(raw))
	if _, err := nodeauth.ParseCredential(cred); err != nil {
		t.Errorf("credential file holds %q: %v", raw, err)
	}
	if fi, _ := os.Stat(credFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("credential file mode %v, want 0600", fi.Mode().Perm())
	}
	lab.ResetNoSocket(t, 10)
	eventually(t, withinTwoIntervals, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 10 {
			return fmt.Sprintf("before the impostors: stored %v, want 10", got)
		}
		return ""
	})

	forged, _, _ := nodeauth.NewCredential()
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	cases := []struct {
		name string
		auth *nbsv1.NodeAuth
		want string
	}{
		{"no proof", nil, "carries no node credential"},
		{"the fleet bootstrap token", tokenProof(fleetToken), "a bootstrap token cannot take over an enrolled name"},
		{"a made-up credential", credentialProof(forged), "another node credential"},
		{"a malformed credential", credentialProof("nbsn1_" + strings.Repeat("A", 10)), "another node credential"},
		{"a wrong bootstrap token", tokenProof(strings.Repeat("z", 40)), "a bootstrap token cannot take over"},
	}
	for _, c := range cases {
		wantDenied(t, c.name, claim(t, col.grpcAddr, plain, "lab-b", c.auth), c.want)
	}
	// A name is one node whatever its case (schema.CanonicalNodeName): a
	// look-alike is lab-b, and needs lab-b's credential.
	for _, variant := range []string{"LAB-B", "Lab-B"} {
		wantDenied(t, variant+" with the fleet bootstrap token", claim(t, col.grpcAddr, plain, variant, tokenProof(fleetToken)),
			"a bootstrap token cannot take over an enrolled name")
		if n, code := getNode(t, col, variant); code != http.StatusOK || n.Name != "lab-b" {
			t.Errorf("GET /nodes/%s: HTTP %d, node %q; want lab-b's page", variant, code, n.Name)
		}
	}
	// The refused Hellos ended quickly; the real node was never displaced.
	unharmed(t, col, lab, "lab-b", 10, b0)

	// A fresh name enrolls with the token; a wrong token enrolls nothing.
	wantDenied(t, "new name, wrong token", claim(t, col.grpcAddr, plain, "fresh-1", tokenProof(strings.Repeat("z", 40))), "not this fleet's, nor a live tenant token")
	if _, code := getNode(t, col, "fresh-1"); code != http.StatusNotFound {
		t.Errorf("a refused enrollment registered the node: HTTP %d", code)
	}
}

// With mutual TLS, a client whose certificate is from the fleet's CA but for
// another name is refused when it claims a connected node, and lands
// nothing; a certificate the operator's identity map allows other names for
// reports under those names only.
func TestIdentityMutualTLSRefusesAnotherNodesCertificate(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	ca := newCA(t, "nbs-fleet-ca")
	caFile := filepath.Join(ca.dir, "ca.pem")
	serverCert, serverKey := ca.issue(t, "collector", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	agentCert, agentKey := ca.issue(t, "lab-b", x509.ExtKeyUsageClientAuth)
	otherCert, otherKey := ca.issue(t, "node-x", x509.ExtKeyUsageClientAuth)
	gwCert, gwKey := ca.issue(t, "gw.example.net", x509.ExtKeyUsageClientAuth)
	idMap := filepath.Join(t.TempDir(), "identity-map")
	// lab-b's own certificate reports as lab-b, and the map binds it to
	// acme: under mutual TLS the tenant is the operator's (certificate or
	// map), never the agent's.
	if err := os.WriteFile(idMap, []byte("gw.example.net edge-*\nlab-b lab-b customer=acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) {
		c.Ingest.TLSCertFile, c.Ingest.TLSKeyFile, c.Ingest.ClientCAFile, c.NodeAuth.IdentityMapFile = serverCert, serverKey, caFile, idMap
	})
	startAgent(t, "lab-b", lab.B, col.grpcAddr, func(c *agentapp.Config) {
		c.Labels = agentapp.Labels{"customer": "acme"}
		c.CollectorCA, c.CollectorCert, c.CollectorKey = caFile, agentCert, agentKey
	})
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)
	lab.ResetNoSocket(t, 10)
	eventually(t, withinTwoIntervals, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 10 {
			return fmt.Sprintf("before the impostors: stored %v, want 10", got)
		}
		return ""
	})

	withCert := func(cert, key string) grpc.DialOption { return dialWithCert(t, cert, key, ca) }
	wantDenied(t, "node-x's certificate claiming lab-b", claim(t, col.grpcAddr, withCert(otherCert, otherKey), "lab-b", nil),
		`the client certificate is for "node-x", which may not report as "lab-b"`)
	wantDenied(t, "the gateway claiming lab-b", claim(t, col.grpcAddr, withCert(gwCert, gwKey), "lab-b", nil),
		`the client certificate is for "gw.example.net", which may not report as "lab-b"`)
	// A credential means nothing under mutual TLS.
	forged, _, _ := nodeauth.NewCredential()
	wantDenied(t, "node-x with a credential", claim(t, col.grpcAddr, withCert(otherCert, otherKey), "lab-b", credentialProof(forged)), "may not report as")
	unharmed(t, col, lab, "lab-b", 10, b0)

	if err := claim(t, col.grpcAddr, withCert(gwCert, gwKey), "edge-1", nil); err != nil {
		t.Errorf("the gateway claiming edge-1, which the identity map allows: %v", err)
	}
	if err := claim(t, col.grpcAddr, withCert(otherCert, otherKey), "node-x", nil); err != nil {
		t.Errorf("node-x claiming its own name: %v", err)
	}
	eventually(t, 10*time.Second, func() string {
		if _, code := getNode(t, col, "edge-1"); code != http.StatusOK {
			return fmt.Sprintf("edge-1: HTTP %d", code)
		}
		return ""
	})
}

// An agent restart — the same credential file, a new instance — takes over
// its name even while the old instance's stream is still open: the old
// stream is ended (Aborted, "replaced"), its end does not disconnect the
// node, and config pushes reach the new instance.
func TestIdentityAgentRestartTakesOverItsName(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", enrollWith(tokenFile(t)))
	credFile := filepath.Join(t.TempDir(), "node-credential")
	cfg := acmeEnrolling(credFile, tenantTokenFile(t, col, "acme"))
	first := startAgent(t, "lab-b", lab.B, col.grpcAddr, cfg)
	waitNode(t, col, "lab-b")
	first.stop()
	raw, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatal(err)
	}
	cred := strings.TrimSpace(string(raw))

	// The old instance, as a lingering connection: a raw stream with the
	// node's credential.
	conn, err := grpc.NewClient(col.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, err := nbsv1.NewAgentServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := hello("lab-b")
	h.GetHello().Labels = map[string]string{"customer": "acme"}
	h.GetHello().Auth = credentialProof(cred)
	if err := old.Send(h); err != nil {
		t.Fatal(err)
	}
	if m, err := old.Recv(); err != nil || m.GetConfig() == nil {
		t.Fatalf("the node's credential on a raw stream: %v, %v; want its Config", m, err)
	}

	// The restarted agent has its credential and no bootstrap token.
	startAgent(t, "lab-b", lab.B, col.grpcAddr, cfg, func(c *agentapp.Config) { c.BootstrapTokenFile = "" })
	oldEnd := make(chan error, 1)
	go func() {
		for {
			if _, err := old.Recv(); err != nil {
				oldEnd <- err
				return
			}
		}
	}()
	select {
	case err := <-oldEnd:
		if status.Code(err) != codes.Aborted || !strings.Contains(status.Convert(err).Message(), "replaced by a newer stream") {
			t.Errorf("the old stream ended with %v; want Aborted, replaced by a newer stream", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the old stream was not ended when the restarted agent connected")
	}
	cancel()
	time.Sleep(500 * time.Millisecond) // the old stream's end must not disconnect the node
	b0 := lab.Nstat(t, lab.B)
	n, _ := getNode(t, col, "lab-b")
	if !n.Connected || n.AgentVersion == "test" {
		t.Errorf("after the restart: %+v; want the new instance connected", n)
	}
	if got, _ := os.ReadFile(credFile); string(got) != string(raw) {
		t.Errorf("the restarted agent changed its credential file: %q, was %q", got, raw)
	}
	// Everything before the restart is stored (none of it resets), so from
	// here the totals count the resets the new instance saw.
	unharmed(t, col, lab, "lab-b", 0, b0)
}

func post(t *testing.T, col *collector, path string) (int, string) {
	t.Helper()
	code, b := col.call(t, http.MethodPost, path, "")
	return code, string(b)
}

type identities struct {
	Mode  string `json:"mode"`
	Nodes []struct {
		Node      string `json:"node"`
		State     string `json:"state"`
		Connected bool   `json:"connected"`
	} `json:"nodes"`
}

func identityState(t *testing.T, col *collector, node string) string {
	t.Helper()
	var ids identities
	col.getJSON(t, "/api/v1/node-identities", &ids)
	for _, n := range ids.Nodes {
		if n.Node == node {
			return n.State
		}
	}
	return "absent"
}

// Revocation ends the node's stream and refuses its next Hellos, credential
// or token alike; re-enrollment lets the agent enroll again by itself (with
// its bootstrap token), and what it measured meanwhile arrives exactly once;
// deletion takes the node's data.
func TestIdentityRevocationAndReenrollment(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", enrollWith(tokenFile(t)))
	credFile := filepath.Join(t.TempDir(), "node-credential")
	ag := startAgent(t, "lab-b", lab.B, col.grpcAddr, acmeEnrolling(credFile, tenantTokenFile(t, col, "acme")))
	waitNode(t, col, "lab-b")
	base := "/api/v1"
	var ids identities
	col.getJSON(t, base+"/node-identities", &ids)
	if ids.Mode != "enroll" || identityState(t, col, "lab-b") != "enrolled" {
		t.Errorf("node identities: %+v; want mode enroll and lab-b enrolled", ids)
	}
	first, _ := os.ReadFile(credFile)

	if code, body := post(t, col, base+"/nodes/lab-b/revoke"); code != http.StatusOK {
		t.Fatalf("revoke: HTTP %d %s", code, body)
	}
	eventually(t, 5*time.Second, func() string {
		if n, _ := getNode(t, col, "lab-b"); n.Connected {
			return "lab-b is still connected after its revocation"
		}
		return ""
	})
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	wantDenied(t, "the revoked node's credential", claim(t, col.grpcAddr, plain, "lab-b", credentialProof(strings.TrimSpace(string(first)))), "was revoked")
	wantDenied(t, "the bootstrap token for the revoked name", claim(t, col.grpcAddr, plain, "lab-b", tokenProof(fleetToken)), "was revoked")
	if s := identityState(t, col, "lab-b"); s != "revoked" {
		t.Errorf("lab-b is %s, want revoked", s)
	}

	// Resets while revoked wait in the agent.
	b0 := lab.Nstat(t, lab.B)
	lab.ResetNoSocket(t, 7)
	time.Sleep(2 * interval)
	// (-1: the metric is not even defined yet.)
	if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got > 0 {
		t.Errorf("a revoked node's reports were stored: %v resets", got)
	}

	if code, body := post(t, col, base+"/nodes/lab-b/reenroll"); code != http.StatusOK {
		t.Fatalf("reenroll: HTTP %d %s", code, body)
	}
	// The agent retries a refusal after up to 30 s; then its old credential
	// is unknown, and it enrolls again with its token.
	eventually(t, 60*time.Second, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 7 {
			return fmt.Sprintf("after re-enrollment: stored %v resets, want the 7 from the revocation", got)
		}
		if n, _ := getNode(t, col, "lab-b"); !n.Connected {
			return "lab-b is not connected again"
		}
		return ""
	})
	second, _ := os.ReadFile(credFile)
	if len(second) == 0 || string(second) == string(first) {
		t.Errorf("re-enrollment left the credential file at %q (was %q)", second, first)
	}
	if s := identityState(t, col, "lab-b"); s != "enrolled" {
		t.Errorf("lab-b is %s, want enrolled again", s)
	}
	unharmed(t, col, lab, "lab-b", 7, b0)

	// Delete, once the agent is gone: the node, its data and its credential.
	ag.stop()
	if code, body := col.call(t, http.MethodDelete, base+"/nodes/lab-b", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE node: HTTP %d %s", code, body)
	}
	if _, code := getNode(t, col, "lab-b"); code != http.StatusNotFound {
		t.Errorf("deleted node: HTTP %d, want 404", code)
	}
	if s := identityState(t, col, "lab-b"); s != "absent" {
		t.Errorf("deleted node's identity is %s, want it gone", s)
	}
	wantDenied(t, "the deleted node's credential", claim(t, col.grpcAddr, plain, "lab-b", credentialProof(strings.TrimSpace(string(second)))), "does not know")
	if code, _ := post(t, col, base+"/nodes/no-such-node/reenroll"); code != http.StatusNotFound {
		t.Errorf("reenroll of an unknown node: HTTP %d, want 404", code)
	}
	if code, _ := post(t, col, base+"/nodes/bad%20name/revoke"); code != http.StatusBadRequest {
		t.Errorf("revoke of an invalid name: HTTP %d, want 400", code)
	}
}

// dialWithCert is a TLS client with a client certificate, trusting cas.
func dialWithCert(t *testing.T, cert, key string, cas ...*testCA) grpc.DialOption {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca.cert)
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
}

// rotator replaces files the way rotation tools do (a new file renamed over
// the old one), each dated a second after the one before, so a change shows
// whatever the file system's mtime resolution.
type rotator struct {
	t    *testing.T
	next time.Time
}

func (r *rotator) rotate(dst string, srcs ...string) {
	t := r.t
	t.Helper()
	var data []byte
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if r.next.IsZero() {
		r.next = time.Now()
	}
	r.next = r.next.Add(time.Second)
	if err := os.Chtimes(tmp, r.next, r.next); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// Rotated certificate files are used without restarting the process that
// reads them: the collector's server certificate and its client CA on the
// next handshake, and the agent's client certificate on its next connection.
func TestTLSFilesReloadWithoutRestart(t *testing.T) {
	t.Parallel()
	old, next := newCA(t, "fleet-old"), newCA(t, "fleet-next")
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	r := &rotator{t: t}
	rotate := func(dst string, srcs ...string) { t.Helper(); r.rotate(dst, srcs...) }
	oldServer, oldServerKey := old.issue(t, "collector", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	oldAgent, oldAgentKey := old.issue(t, "tls-reload", x509.ExtKeyUsageClientAuth)
	rotate(path("server.pem"), oldServer)
	rotate(path("server-key.pem"), oldServerKey)
	rotate(path("client-ca.pem"), filepath.Join(old.dir, "ca.pem"))
	rotate(path("agent.pem"), oldAgent)
	rotate(path("agent-key.pem"), oldAgentKey)
	// The agent trusts both CAs for the collector, so its certificate can move.
	rotate(path("roots.pem"), filepath.Join(old.dir, "ca.pem"), filepath.Join(next.dir, "ca.pem"))

	addr := freeAddr(t)
	db := pgcluster.Database(t)
	cfg := func(c *collectorapp.Config) {
		c.Ingest.TLSCertFile, c.Ingest.TLSKeyFile, c.Ingest.ClientCAFile = path("server.pem"), path("server-key.pem"), path("client-ca.pem")
	}
	col := startCollector(t, db, addr, cfg)
	startAgent(t, "tls-reload", "", addr, func(c *agentapp.Config) {
		c.BPF = false
		c.CollectorCA, c.CollectorCert, c.CollectorKey = path("roots.pem"), path("agent.pem"), path("agent-key.pem")
	})
	waitNode(t, col, "tls-reload")

	serverIssuer := func() string {
		roots := x509.NewCertPool()
		roots.AddCert(old.cert)
		roots.AddCert(next.cert)
		// TLS 1.3 shows the server's certificate before the server has
		// judged the (absent) client certificate.
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13})
		if err != nil {
			return "dial: " + err.Error()
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Issuer.CommonName
	}
	if got := serverIssuer(); got != "fleet-old" {
		t.Fatalf("collector certificate issued by %q, want fleet-old", got)
	}
	nextServer, nextServerKey := next.issue(t, "collector", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	rotate(path("server-key.pem"), nextServerKey)
	rotate(path("server.pem"), nextServer)
	if got := serverIssuer(); got != "fleet-next" {
		t.Errorf("after rotating the collector's certificate files, it presents one issued by %q, want fleet-next", got)
	}

	probe, probeKey := next.issue(t, "probe-1", x509.ExtKeyUsageClientAuth)
	if err := claim(t, addr, dialWithCert(t, probe, probeKey, old, next), "probe-1", nil); err == nil {
		t.Error("a certificate from a CA the collector does not trust yet was accepted")
	}
	// The client CA moves to a bundle of both: new certificates are
	// accepted, and agents still holding old ones keep working.
	rotate(path("client-ca.pem"), filepath.Join(old.dir, "ca.pem"), filepath.Join(next.dir, "ca.pem"))
	if err := claim(t, addr, dialWithCert(t, probe, probeKey, old, next), "probe-1", nil); err != nil {
		t.Errorf("after adding the new CA to the client CA file: %v", err)
	}

	// The agent's certificate moves to the new CA, and the collector stops
	// trusting the old one. The agent keeps running: its next connection
	// (to a restarted collector) can only succeed with the new certificate.
	nextAgent, nextAgentKey := next.issue(t, "tls-reload", x509.ExtKeyUsageClientAuth)
	rotate(path("agent-key.pem"), nextAgentKey)
	rotate(path("agent.pem"), nextAgent)
	rotate(path("client-ca.pem"), filepath.Join(next.dir, "ca.pem"))
	col.stop()
	restarted := time.Now()
	col = startCollector(t, db, addr, cfg)
	eventually(t, 30*time.Second, func() string {
		n, _ := getNode(t, col, "tls-reload")
		if !n.Connected || n.LastReport == nil || !n.LastReport.After(restarted) {
			return fmt.Sprintf("the agent is not back with its new certificate: %+v", n)
		}
		return ""
	})
}

// The documented way to issue a fleet's certificates works end to end:
// deploy/tls/nbs-certs makes a CA, a collector certificate and node
// certificates; an agent reports with its own, and another node's
// certificate cannot claim its name.
func TestTLSCertificatesFromTheDeployScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join("..", "deploy", "tls", "nbs-certs")
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(script, append([]string{dir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nbs-certs %v: %v\n%s", args, err, out)
		}
	}
	run("ca")
	run("collector", "collector-1", "127.0.0.1")
	run("node", "script-node", "other-node")
	if fi, err := os.Stat(filepath.Join(dir, "nodes", "script-node-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("node key: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	caFile := filepath.Join(dir, "ca.pem")
	node := func(name string) (string, string) {
		return filepath.Join(dir, "nodes", name+".pem"), filepath.Join(dir, "nodes", name+"-key.pem")
	}
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) {
		c.Ingest.TLSCertFile, c.Ingest.TLSKeyFile = filepath.Join(dir, "collector", "collector-1.pem"), filepath.Join(dir, "collector", "collector-1-key.pem")
		c.Ingest.ClientCAFile = caFile
	})
	cert, key := node("script-node")
	startAgent(t, "script-node", "", col.grpcAddr, func(c *agentapp.Config) {
		c.BPF = false
		c.CollectorCA, c.CollectorCert, c.CollectorKey = caFile, cert, key
	})
	waitNode(t, col, "script-node")

	roots := x509.NewCertPool()
	pemCA, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pemCA)
	otherCert, otherKey := node("other-node")
	pair, err := tls.LoadX509KeyPair(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	dial := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	wantDenied(t, "other-node's certificate claiming script-node", claim(t, col.grpcAddr, dial, "script-node", nil),
		`the client certificate is for "other-node"`)
	if err := claim(t, col.grpcAddr, dial, "other-node", nil); err != nil {
		t.Errorf("other-node with its own certificate: %v", err)
	}
}

// enrollWith makes a collector enroll nodes with the bootstrap token in file.
func enrollWith(file string) func(*collectorapp.Config) {
	return func(c *collectorapp.Config) { c.NodeAuth.BootstrapTokenFile = file }
}

// tenantTokenFile creates a tenant's bootstrap token through the API, as
// an admin would for a customer's fleet, and writes it to a file an agent
// can be given.
func tenantTokenFile(t *testing.T, col *collector, tenant string) string {
	t.Helper()
	code, body := col.call(t, http.MethodPost, "/api/v1/node-bootstrap-tokens",
		fmt.Sprintf(`{"name":"%s-fleet-%d","labels":{"customer":%q}}`, tenant, time.Now().UnixNano(), tenant))
	if code != http.StatusCreated {
		t.Fatalf("create %s's bootstrap token: HTTP %d %s", tenant, code, body)
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		t.Fatalf("create %s's bootstrap token: %s: %v", tenant, body, err)
	}
	p := filepath.Join(t.TempDir(), tenant+"-bootstrap-token")
	if err := os.WriteFile(p, []byte(out.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// acmeEnrolling is an agent of customer acme that keeps its node credential
// in credFile and enrolls with the bootstrap token in tokenFile (acme's:
// the fleet's token binds no tenant, whatever the agent's labels say).
func acmeEnrolling(credFile, tokenFile string) func(*agentapp.Config) {
	return func(c *agentapp.Config) {
		c.Labels = agentapp.Labels{"customer": "acme"}
		c.CredentialFile, c.BootstrapTokenFile = credFile, tokenFile
	}
}
