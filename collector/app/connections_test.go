package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// TestNoAddressLocksOthersOut is the load test of the HTTP connection
// limits: attackers hold their maximum of TLS connections (idle after a
// request, and stuck mid-handshake) and reconnect whenever one is closed,
// while a new user signs in and reads the fleet. First one address at its
// bound, then four filling the whole server; the user's time is measured
// in the same run without attackers, and must stay within a generous
// multiple of it. Clients dial from addresses of their own on the
// loopback network.
func TestNoAddressLocksOthersOut(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, roots := selfSigned(t, dir)
	tokenFile := filepath.Join(dir, "admin-token")
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DBURL = "127.0.0.1:0", "127.0.0.1:0", pgcluster.Database(t)
	cfg.Access.TLSCertFile, cfg.Access.TLSKeyFile, cfg.Access.BootstrapAdminFile = certFile, keyFile, tokenFile
	const maxConns, perAddress = 64, 16
	cfg.HTTP.MaxConns, cfg.HTTP.MaxConnsPerAddress = maxConns, perAddress
	c, stop := startCollector(t, cfg)
	defer stop()
	_, addr := c.Addrs()
	secret, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(secret))

	// A user signs in from 127.0.0.9 on a new connection, as a browser
	// opening the UI does, and reads the first page of the fleet.
	user := func() (time.Duration, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "nbs.test"},
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9)}}).DialContext}
		defer tr.CloseIdleConnections()
		jar, _ := cookiejar.New(nil)
		client := &http.Client{Transport: tr, Jar: jar, Timeout: 30 * time.Second}
		start := time.Now()
		resp, err := client.Post("https://"+addr+"/api/v1/login", "application/json", strings.NewReader(`{"token":"`+token+`"}`))
		if err != nil {
			return 0, fmt.Errorf("sign in: %w", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("sign in: %s", resp.Status)
		}
		resp, err = client.Get("https://" + addr + "/api/v1/fleet?limit=100")
		if err != nil {
			return 0, fmt.Errorf("read the fleet: %w", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"nodes"`) {
			return 0, fmt.Errorf("read the fleet: %s %.200s", resp.Status, b)
		}
		return time.Since(start), nil
	}
	// median of rounds, each on a new connection; every round must succeed.
	measure := func(what string) time.Duration {
		t.Helper()
		var took []time.Duration
		for range 7 {
			d, err := user()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			took = append(took, d)
		}
		slices.Sort(took)
		t.Logf("%s: sign in and read the fleet: median %s, slowest %s", what, took[len(took)/2], took[len(took)-1])
		return took[len(took)/2]
	}
	// Generous: the bound is the unloaded median five times over, plus a
	// second for a loaded 2-core machine.
	within := func(what string, loaded, base time.Duration) {
		t.Helper()
		if limit := 5*base + time.Second; loaded > limit {
			t.Errorf("%s: the user's median %s, past %s (5× the unloaded %s + 1s)", what, loaded, limit, base)
		}
	}

	base := measure("no attacker")

	ctx, cancel := context.WithCancel(context.Background())
	var attackers sync.WaitGroup
	defer func() { cancel(); attackers.Wait() }()
	// attack keeps n connections of a kind open from 127.0.0.<from>.
	attack := func(from byte, n int, kind string) {
		for range n {
			attackers.Go(func() { hold(ctx, addr, from, kind, roots) })
		}
	}

	// One address at its maximum, half idle and half mid-handshake, and
	// asking for more.
	attack(2, perAddress/2, "idle")
	attack(2, perAddress/2, "handshake")
	attack(2, 4, "idle")
	waitFor(t, "the attacker's connections refused past its bound", func() bool { return connMetric(t, c, "refused") > 0 })
	within("one address at its bound", measure("one address at its bound"), base)

	// Four more addresses fill the server: idle connections make room.
	for from := byte(3); from <= 6; from++ {
		attack(from, perAddress/2, "idle")
		attack(from, perAddress/2, "handshake")
	}
	waitFor(t, "the server full", func() bool { return connMetric(t, c, "open") >= maxConns })
	within("the server full", measure("the server full of attackers"), base)
	if connMetric(t, c, "idle") == 0 {
		t.Error("no idle connection was closed for the user while the server was full")
	}
}

// hold keeps one connection of kind to addr open from 127.0.0.<from>,
// opening another whenever the server closes it, until ctx ends: "idle"
// is a TLS connection kept alive after one request, "handshake" one that
// sent the first bytes of a TLS record and nothing more.
func hold(ctx context.Context, addr string, from byte, kind string, roots *x509.CertPool) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, from)}, Timeout: 5 * time.Second}
	for ctx.Err() == nil {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			switch kind {
			case "idle":
				tc := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: "nbs.test"})
				if _, err = io.WriteString(tc, "GET /healthz HTTP/1.1\r\nHost: nbs.test\r\n\r\n"); err == nil {
					// The answer, then nothing until the server closes it.
					_, err = io.Copy(io.Discard, tc)
				}
			case "handshake":
				if _, err = conn.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}); err == nil {
					_, err = io.Copy(io.Discard, conn)
				}
			}
			stop()
			conn.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

// connMetric reads an HTTP connection metric of c's /metrics registry:
// "open" (the gauge), "refused", or the closed counter of a reason.
func connMetric(t *testing.T, c *Collector, which string) float64 {
	t.Helper()
	want := map[string]string{"open": "nbs_collector_http_connections", "refused": "nbs_collector_http_connections_refused_total"}[which]
	if want == "" {
		want = "nbs_collector_http_connections_closed_total"
	}
	mfs, err := c.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != want {
			continue
		}
		for _, m := range mf.GetMetric() {
			if want == "nbs_collector_http_connections_closed_total" && !hasLabel(m, "reason", which) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// The gRPC listener bounds one address's connections too, counted on
// /metrics; an agent from another address still gets its Config.
func TestGRPCConnectionsPerAddress(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DBURL = "127.0.0.1:0", "127.0.0.1:0", pgcluster.Database(t)
	cfg.Ingest.MaxConnsPerAddress = 4
	c, stop := startCollector(t, cfg)
	defer stop()
	grpcAddr, _ := c.Addrs()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	for range 4 {
		conn, err := d.Dial("tcp", grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
	}
	waitFor(t, "the address's 4 connections open", func() bool { return grpcMetric(t, c, "nbs_collector_grpc_connections") == 4 })
	fifth, err := d.Dial("tcp", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer fifth.Close()
	fifth.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := fifth.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
		t.Errorf("a fifth connection from the address: read %v, want it closed", err)
	}
	if n := grpcMetric(t, c, "nbs_collector_grpc_connections_refused_total"); n != 1 {
		t.Errorf("refused = %v, want 1", n)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := nbsv1.NewAgentServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: &nbsv1.Hello{NodeName: "other-1", InstanceId: 1, IntervalMs: 1000,
		Metrics: []*nbsv1.MetricDefinition{{Id: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || m.GetConfig() == nil {
		t.Errorf("an agent from another address: %v, %v; want its Config", m, err)
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

// grpcMetric reads an unlabelled gauge or counter of c's registry.
func grpcMetric(t *testing.T, c *Collector, name string) float64 {
	t.Helper()
	mfs, err := c.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			if g := mf.GetMetric()[0].GetGauge(); g != nil {
				return g.GetValue()
			}
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
