package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/retention"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The attack of issue 27: a tenant's bootstrap token holder enrolls names
// that never report until --ingest.max-nodes refuses another tenant's
// real node. A tenant's quota stops its new names at its bound while the
// other tenant's node gets in; a name refused by the quota keeps the
// credential it was issued and gets in once there is room; the names that
// never reported leave within --retention.unreported-nodes, giving their
// places back to the fleet and the tenant.
func TestTenantQuotaKeepsTheFleetForOthers(t *testing.T) {
	dbURL := pgcluster.Database(t)
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DBURL = "127.0.0.1:0", "127.0.0.1:0", dbURL
	cfg.NodeAuth.Mode = "enroll"
	cfg.Ingest.MaxNodes = 8
	cfg.Ingest.MaxNodesPerTenant = 4 // globex has it; acme's is set below
	c, stop := startCollector(t, cfg)
	defer stop()
	grpcAddr, _ := c.Addrs()

	ctx := access.WithPrincipal(context.Background(), access.CLIPrincipal())
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, dbURL, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	admin := nodeauth.NewAdmin(st, nil, "", "", log)
	acmeToken, _, err := admin.CreateBootstrapToken(ctx, nodeauth.NewBootstrapToken{Name: "acme", Labels: map[string]string{"customer": "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	globexToken, _, err := admin.CreateBootstrapToken(ctx, nodeauth.NewBootstrapToken{Name: "globex", Labels: map[string]string{"customer": "globex"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.SetTenantQuota(ctx, "acme", 3); err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := nbsv1.NewAgentServiceClient(conn)
	// hello sends one Hello and reads until its Config (nil error) or the
	// stream's end, keeping the credential an enrollment issues.
	hello := func(node string, proof *nbsv1.NodeAuth) (credential string, err error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := client.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: &nbsv1.Hello{
			NodeName: node, InstanceId: 7, IntervalMs: 1000, AgentVersion: "test", Auth: proof,
			Metrics: []*nbsv1.MetricDefinition{{Id: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}},
		}}}); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return credential, err
			}
			if e := m.GetEnrolled(); e != nil {
				credential = e.GetNodeCredential()
			}
			if m.GetConfig() != nil {
				return credential, nil
			}
		}
	}
	token := func(tok string) *nbsv1.NodeAuth {
		return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_BootstrapToken{BootstrapToken: tok}}
	}

	// The holder of acme's token enrolls names it never reports from.
	for _, n := range []string{"acme-0", "acme-1", "acme-2"} {
		if _, err := hello(n, token(acmeToken)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	cred, err := hello("acme-3", token(acmeToken))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `tenant "acme" has 3 nodes, at most 3 allowed (nbs-collector nodes quota set acme)`) {
		t.Fatalf("acme's 4th name: %v; want ResourceExhausted naming acme's quota", err)
	}
	if cred == "" {
		t.Error("acme-3 was enrolled and refused without its credential: it could never come back")
	}
	// globex's real node gets in: the fleet has room acme could not take.
	if _, err := hello("globex-1", token(globexToken)); err != nil {
		t.Fatalf("globex's real node: %v", err)
	}
	// --ingest.max-nodes-per-tenant bounds a tenant without a quota of
	// its own, below the fleet's bound.
	for _, n := range []string{"globex-2", "globex-3", "globex-4"} {
		if _, err := hello(n, token(globexToken)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	if _, err := hello("globex-5", token(globexToken)); status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), `tenant "globex" has 4 nodes, at most 4 allowed (--ingest.max-nodes-per-tenant)`) {
		t.Fatalf("globex's 5th node: %v; want ResourceExhausted naming --ingest.max-nodes-per-tenant", err)
	}

	// The names acme never reported from leave after hours, not days.
	if _, err := st.Pool().Exec(ctx, `UPDATE nodes SET last_hello = now() - interval '7 hours' WHERE tenant = 'acme'`); err != nil {
		t.Fatal(err)
	}
	rc := retention.DefaultConfig()
	s, err := retention.New(st, admin, rc, log).Pass(ctx, time.Now())
	if err != nil || s.UnreportedNodes != 3 {
		t.Fatalf("retention pass: %+v, %v; want acme's 3 unreported names deleted", s, err)
	}
	// acme-3 comes back with the credential it was issued, once there is room.
	if _, err := hello("acme-3", &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_NodeCredential{NodeCredential: cred}}); err != nil {
		t.Fatalf("acme-3 with its credential, under acme's quota again: %v", err)
	}
	if n := connMetricOf(t, c, "nbs_collector_rejects_total", "too_many_nodes_in_tenant"); n < 1 {
		t.Errorf("rejects{reason=too_many_nodes_in_tenant} = %v, want at least 1", n)
	}
}

// connMetricOf reads a counter of c's registry with a reason label.
func connMetricOf(t *testing.T, c *Collector, name, reason string) float64 {
	t.Helper()
	mfs, err := c.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabel(m, "reason", reason) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
