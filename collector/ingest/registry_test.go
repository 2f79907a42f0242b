package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

type countingRegistry struct {
	mu      sync.Mutex
	upserts map[string][]store.Node
	defs    map[string][]string // paths each node's last registration brought, when not nil
	// gate, when set, holds every RegisterNodes until it is closed;
	// inflight and most count the batches held at once, held the Hellos
	// of those held, batches the Hellos of each batch.
	gate                 chan struct{}
	inflight, most, held int
	batches              []int
}

func (r *countingRegistry) RegisterNodes(_ context.Context, regs []store.Registration, maxMetrics int) []store.Registered {
	r.mu.Lock()
	gate := r.gate
	r.inflight++
	r.held += len(regs)
	r.most = max(r.most, r.inflight)
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	r.held -= len(regs)
	r.batches = append(r.batches, len(regs))
	out := make([]store.Registered, len(regs))
	for i, g := range regs {
		r.upserts[g.Node.Name] = append(r.upserts[g.Node.Name], g.Node)
		if r.defs != nil {
			r.defs[g.Node.Name] = nil
			for _, d := range g.Defs {
				r.defs[g.Node.Name] = append(r.defs[g.Node.Name], d.Path)
			}
		}
		out[i].ID = 1
		if len(g.Defs) > maxMetrics {
			out[i].TooMany = true
			continue
		}
		ids := map[string]int32{}
		for k, d := range g.Defs {
			ids[d.Path] = int32(k + 1)
		}
		out[i].IDs = ids
	}
	return out
}

func (r *countingRegistry) UpsertDefinitions(_ context.Context, _ int32, defs []store.MetricDef) (map[string]int32, error) {
	ids := map[string]int32{}
	for i, d := range defs {
		ids[d.Path] = int32(i + 1)
	}
	return ids, nil
}

func (r *countingRegistry) AdmitNodes(_ context.Context, names []string, max, reserved int) (admitted, fresh []bool, total int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	admitted, fresh = make([]bool, len(names)), make([]bool, len(names))
	added := map[string]bool{}
	for i, name := range names {
		if _, ok := r.upserts[name]; ok {
			admitted[i] = true
			continue
		}
		if added[name] || len(r.upserts)+reserved+len(added) < max {
			admitted[i], fresh[i] = true, true
			added[name] = true
			continue
		}
		total = len(r.upserts) + reserved + len(added)
	}
	return admitted, fresh, total, nil
}

func (r *countingRegistry) count(node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.upserts[node])
}

// credentialAuth accepts a Hello whose credential is "cred-<node>", and
// grants "issued-<node>" to one carrying the token "enroll".
type credentialAuth struct{}

func (credentialAuth) Authenticate(_ context.Context, h *nbsv1.Hello) (Grant, error) {
	switch h.GetAuth().GetNodeCredential() {
	case "cred-" + h.GetNodeName():
		return Grant{}, nil
	}
	if h.GetAuth().GetBootstrapToken() == "enroll" {
		return Grant{Credential: "issued-" + h.GetNodeName()}, nil
	}
	return Grant{}, status.Error(codes.PermissionDenied, "not this node")
}

func startServer(t *testing.T) (*Server, *countingRegistry, nbsv1.AgentServiceClient) {
	t.Helper()
	return startServerWith(t, ServerOptions{Auth: credentialAuth{}})
}

func startServerWith(t *testing.T, opts ServerOptions) (*Server, *countingRegistry, nbsv1.AgentServiceClient) {
	t.Helper()
	// As the collector serves them (TestStreamLimits and a push test serve
	// streams without it).
	return startServerOn(t, opts, InterruptibleStreams())
}

func startServerOn(t *testing.T, opts ServerOptions, grpcOpts ...grpc.ServerOption) (*Server, *countingRegistry, nbsv1.AgentServiceClient) {
	t.Helper()
	reg := &countingRegistry{upserts: map[string][]store.Node{}}
	m := telemetry.New()
	log := slog.New(slog.DiscardHandler)
	srv := NewServer(reg, NewWriter(nil, WriterOptions{}, log, m), opts, log, m)
	return srv, reg, serve(t, srv, grpcOpts...)
}

// serve serves srv over an in-memory connection until the test ends.
func serve(t *testing.T, srv *Server, grpcOpts ...grpc.ServerOption) nbsv1.AgentServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	// The collector's codec, as GRPCOptions installs it: reports
	// reach the server as the collector decodes them.
	gs := grpc.NewServer(append([]grpc.ServerOption{ServerCodec()}, grpcOpts...)...)
	nbsv1.RegisterAgentServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return nbsv1.NewAgentServiceClient(conn)
}

type agentStream struct {
	nbsv1.AgentService_ConnectClient
	cancel context.CancelFunc
}

// open sends a Hello for node with a credential and an instance id and
// returns the stream and the first answer's error.
func open(t *testing.T, c nbsv1.AgentServiceClient, node string, auth *nbsv1.NodeAuth, instance uint64, labels map[string]string) (*agentStream, *nbsv1.ConnectResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := &nbsv1.Hello{NodeName: node, InstanceId: instance, IntervalMs: 1000, Labels: labels, Auth: auth,
		Metrics: []*nbsv1.MetricDefinition{{Id: "tcp_reset", Title: "resets", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}}
	if err := s.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: h}}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	return &agentStream{s, cancel}, m, err
}

func cred(c string) *nbsv1.NodeAuth {
	return &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_NodeCredential{NodeCredential: c}}
}

// nextConfig waits for a Config on the stream, or the stream's end.
func nextConfig(s *agentStream) (*nbsv1.Config, error) {
	for {
		m, err := s.Recv()
		if err != nil {
			return nil, err
		}
		if c := m.GetConfig(); c != nil {
			return c, nil
		}
	}
}

// A refused Hello stores nothing and displaces nothing; a newer
// authenticated stream of the node replaces the older one, whose end then
// leaves the node connected; config pushes follow the current stream; an
// operator's Disconnect ends it with the status it is given.
func TestStreamRegistryFollowsAuthenticatedStreams(t *testing.T) {
	srv, reg, client := startServer(t)
	first, m, err := open(t, client, "n1", cred("cred-n1"), 1, map[string]string{"customer": "acme"})
	if err != nil || m.GetConfig() == nil {
		t.Fatalf("first node: %v, %v; want its Config", m, err)
	}
	if !srv.Connected("n1") || reg.count("n1") != 1 {
		t.Fatalf("first node: connected %v, %d upserts", srv.Connected("n1"), reg.count("n1"))
	}

	for _, auth := range []*nbsv1.NodeAuth{nil, cred("cred-n2"), cred("forged")} {
		imp, m, err := open(t, client, "n1", auth, 2, map[string]string{"customer": "evil"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("impostor with %v: %v, %v; want PermissionDenied", auth, m, err)
		}
		imp.cancel()
	}
	if reg.count("n1") != 1 || !srv.Connected("n1") {
		t.Errorf("after impostors: %d upserts (want 1), connected %v", reg.count("n1"), srv.Connected("n1"))
	}
	srv.PushConfig(context.Background(), "n1")
	if _, err := nextConfig(first); err != nil {
		t.Fatalf("config push to the first node after impostors: %v", err)
	}

	// The agent restarts while its old stream lingers.
	restarted, m, err := open(t, client, "n1", cred("cred-n1"), 3, map[string]string{"customer": "acme"})
	if err != nil || m.GetConfig() == nil {
		t.Fatalf("restarted agent: %v, %v", m, err)
	}
	if _, err := nextConfig(first); status.Code(err) != codes.Aborted {
		t.Errorf("old stream after the restart: %v, want Aborted", err)
	}
	first.cancel()
	time.Sleep(100 * time.Millisecond)
	if !srv.Connected("n1") {
		t.Error("the old stream's end disconnected the node")
	}
	srv.PushConfig(context.Background(), "n1")
	if _, err := nextConfig(restarted); err != nil {
		t.Fatalf("config push to the restarted agent: %v", err)
	}

	if !srv.Disconnect("n1", status.Error(codes.PermissionDenied, "revoked")) {
		t.Error("Disconnect found no stream")
	}
	if _, err := nextConfig(restarted); status.Code(err) != codes.PermissionDenied {
		t.Errorf("disconnected stream ended with %v, want PermissionDenied", err)
	}
	if srv.Connected("n1") || srv.Disconnect("n1", nil) {
		t.Error("the node is still connected after Disconnect")
	}
}

// A node enrolled by its Hello gets its credential first, then its Config.
func TestEnrolledCredentialIsTheFirstMessage(t *testing.T) {
	_, _, client := startServer(t)
	s, m, err := open(t, client, "n9", &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_BootstrapToken{BootstrapToken: "enroll"}}, 1, nil)
	if err != nil || m.GetEnrolled().GetNodeCredential() != "issued-n9" {
		t.Fatalf("first answer %v, %v; want Enrolled with issued-n9", m, err)
	}
	if _, err := nextConfig(s); err != nil {
		t.Fatalf("after Enrolled: %v, want the Config", err)
	}
}

// Hellos are registered in batches by one registrar, one batch at a
// time: a fleet reconnecting shares its statements and holds one database
// connection instead of taking every one from the writers; the Hellos
// that came while a batch was stored are admitted together, and those that
// come while one is stored are stored together; every node
// is registered.
func TestRegistrationsAreBatched(t *testing.T) {
	srv, reg, c := startServer(t)
	reg.mu.Lock()
	reg.gate = make(chan struct{})
	reg.mu.Unlock()
	const nodes = 6
	errs := make(chan error, nodes)
	hello := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := c.Connect(ctx)
		if err == nil {
			node := fmt.Sprintf("reg-%d", i)
			err = s.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: &nbsv1.Hello{
				NodeName: node, InstanceId: 1, IntervalMs: 1000, Auth: cred("cred-" + node),
				Metrics: []*nbsv1.MetricDefinition{{Id: "tcp_reset", Title: "resets", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}}}})
		}
		if err == nil {
			_, err = s.Recv() // the first Config: registered
		}
		errs <- err
	}
	go hello(0)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("the first batch", func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return reg.inflight == 1
	})
	for i := 1; i < nodes; i++ {
		go hello(i)
	}
	waitFor("the other Hellos to wait for the registrar", func() bool {
		srv.registrar.mu.Lock()
		defer srv.registrar.mu.Unlock()
		return len(srv.registrar.admits) == nodes-1
	})
	// They are admitted in one batch once the first is stored, and
	// authenticated one at a time: those authenticated before the
	// registrar is free again go in the next batch (how many depends on
	// the scheduler), and every one authenticated while that batch is
	// held waits, to go in one batch after it.
	reg.gate <- struct{}{}
	waitFor("the rest to wait for the registrar's second batch", func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		srv.registrar.mu.Lock()
		defer srv.registrar.mu.Unlock()
		return reg.inflight == 1 && reg.held+len(srv.registrar.regs) == nodes-1
	})
	close(reg.gate)
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	sum := 0
	for _, n := range reg.batches {
		sum += n
	}
	if reg.most != 1 || len(reg.upserts) != nodes || sum != nodes || len(reg.batches) < 2 || len(reg.batches) > 3 || reg.batches[0] != 1 {
		t.Fatalf("at most %d batches at once (want 1), %d nodes registered (want %d), batches %v (want the first alone, then at most two more for the other %d)",
			reg.most, len(reg.upserts), nodes, reg.batches, nodes-1)
	}
}

// recordingAuth grants every Hello and records whom it was asked about:
// an enrollment would bind a credential to each of them.
type recordingAuth struct {
	mu    sync.Mutex
	asked []string
	grant Grant
}

func (a *recordingAuth) Authenticate(_ context.Context, h *nbsv1.Hello) (Grant, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, h.GetNodeName())
	return a.grant, nil
}

// The node limit is checked before the Hello is authenticated, so a
// bootstrap token's holder cannot bind credentials to names past it; and
// the grant's bound labels replace what the Hello claims, with the claim
// kept for the node's page and counted in /metrics.
func TestNodeLimitBeforeAuthenticationAndBoundLabels(t *testing.T) {
	auth := &recordingAuth{grant: Grant{Bound: map[string]string{"customer": "acme"}, Protected: []string{"customer"}}}
	lim := DefaultLimits()
	lim.MaxNodes = 1
	srv, reg, client := startServerWith(t, ServerOptions{Auth: auth, Limits: lim})
	s, m, err := open(t, client, "n1", nil, 1, map[string]string{"customer": "globex", "rack": "r1"})
	if err != nil || m.GetConfig() == nil {
		t.Fatalf("first node: %v, %v", m, err)
	}
	s.cancel()
	_, _, err = open(t, client, "n2", nil, 1, nil)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second node past --ingest.max-nodes 1: %v; want ResourceExhausted", err)
	}
	auth.mu.Lock()
	asked := slices.Clone(auth.asked)
	auth.mu.Unlock()
	if !slices.Equal(asked, []string{"n1"}) {
		t.Errorf("authenticated %v; want only n1 (n2 was past the limit before anything was bound to it)", asked)
	}
	reg.mu.Lock()
	n := reg.upserts["n1"][0]
	reg.mu.Unlock()
	if n.Labels["customer"] != "acme" || n.Labels["rack"] != "r1" || n.Tenant != "acme" || n.ClaimedLabels["customer"] != "globex" {
		t.Errorf("n1 registered with labels %v, tenant %q, claimed %v; want customer=acme (bound), rack=r1, claimed customer=globex",
			n.Labels, n.Tenant, n.ClaimedLabels)
	}
	var conflicts dto.Metric
	if err := srv.metrics.LabelConflicts.Write(&conflicts); err != nil || conflicts.GetCounter().GetValue() != 1 {
		t.Errorf("label conflicts counted %v (%v), want 1", conflicts.GetCounter().GetValue(), err)
	}
}

// With InterruptibleStreams a connected stream holds one goroutine here
// (its handler, which receives); without, two (a receiver aside). The
// streams share one connection, so gRPC's per-connection goroutines are in
// neither count; the client's per stream are in both, and cancel out. A
// replaced stream still ends with Aborted either way.
func TestStreamGoroutines(t *testing.T) {
	const streams = 20
	var srv *Server
	// The runner's workers (senders, reports) serve every stream and
	// linger a while after their task: not a stream's.
	count := func() int { return runtime.NumGoroutine() - int(srv.runner.live.Load()) }
	settled := func() int {
		n := count()
		for range 100 {
			time.Sleep(20 * time.Millisecond)
			m := count()
			if m == n {
				return n
			}
			n = m
		}
		return n
	}
	added := map[string]int{}
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
	}{
		{"interruptible", []grpc.ServerOption{InterruptibleStreams()}},
		{"plain", nil},
	} {
		var c nbsv1.AgentServiceClient
		srv, _, c = startServerOn(t, ServerOptions{}, tc.opts...)
		// A first stream opens the connection.
		first, m, err := open(t, c, tc.name+"-warm", nil, 1, nil)
		if err != nil || m.GetConfig() == nil {
			t.Fatalf("%s: first answer: %v, %v", tc.name, m, err)
		}
		before := settled()
		var opened []*agentStream
		for i := range streams {
			s, m, err := open(t, c, fmt.Sprintf("%s-%02d", tc.name, i), nil, 1, nil)
			if err != nil || m.GetConfig() == nil {
				t.Fatalf("%s: stream %d: %v, %v", tc.name, i, m, err)
			}
			opened = append(opened, s)
		}
		added[tc.name] = settled() - before
		t.Logf("%s: %d streams added %d goroutines", tc.name, streams, added[tc.name])
		newer, _, err := open(t, c, tc.name+"-00", nil, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nextConfig(opened[0]); status.Code(err) != codes.Aborted {
			t.Errorf("%s: replaced stream ended with %v, want Aborted", tc.name, err)
		}
		if !srv.Connected(tc.name + "-00") {
			t.Errorf("%s: the newer stream is not connected", tc.name)
		}
		newer.cancel()
		first.cancel()
		for _, s := range opened {
			s.cancel()
		}
	}
	if got := added["plain"] - added["interruptible"]; got != streams {
		t.Errorf("plain streams held %d goroutines more than interruptible ones, want %d (one receiver each)", got, streams)
	}
}

// gatedAuth grants every Hello once gate is closed, counting the callers
// it holds at once.
type gatedAuth struct {
	gate           chan struct{}
	mu             sync.Mutex
	inflight, most int
}

func (a *gatedAuth) Authenticate(context.Context, *nbsv1.Hello) (Grant, error) {
	a.mu.Lock()
	a.inflight++
	a.most = max(a.most, a.inflight)
	a.mu.Unlock()
	<-a.gate
	a.mu.Lock()
	a.inflight--
	a.mu.Unlock()
	return Grant{}, nil
}

// Authentication may query the database too: with the registrar's
// connection it stays within DefaultRegistrations connections, however
// many Hellos are admitted together.
func TestAuthenticationsAreBounded(t *testing.T) {
	auth := &gatedAuth{gate: make(chan struct{})}
	_, reg, client := startServerWith(t, ServerOptions{Auth: auth})
	const nodes = 5
	errs := make(chan error, nodes)
	for i := range nodes {
		go func() {
			_, m, err := open(t, client, fmt.Sprintf("auth-%d", i), nil, 1, nil)
			if err == nil && m.GetConfig() == nil {
				err = fmt.Errorf("first answer %v, want a Config", m)
			}
			errs <- err
		}()
	}
	time.Sleep(300 * time.Millisecond) // every Hello admitted, waiting to be authenticated
	close(auth.gate)
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	auth.mu.Lock()
	defer auth.mu.Unlock()
	if auth.most != DefaultRegistrations-1 || reg.count("auth-0") != 1 {
		t.Fatalf("%d Hellos authenticated at once, want %d (the registrar holds the other connection); auth-0 registered %d times",
			auth.most, DefaultRegistrations-1, reg.count("auth-0"))
	}
}
