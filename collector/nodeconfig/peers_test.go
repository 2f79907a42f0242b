package nodeconfig

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func fleet(n int) []peer {
	ps := make([]peer, n)
	for i := range ps {
		ps[i] = peer{name: fmt.Sprintf("node-%03d", i), addr: fmt.Sprintf("10.0.%d.%d", i/256, i%256)}
	}
	return ps
}

func name(target string) string { return strings.SplitN(target, "=", 2)[0] }

func TestMesh(t *testing.T) {
	const k = 8
	ps := fleet(200)
	m := newMesh(ps, k)
	got := m.peersOf("node-007")
	if len(got) < k-1 || len(got) > k {
		t.Fatalf("%d peers, want %d", len(got), k)
	}
	if !slices.Equal(got, newMesh(ps, k).peersOf("node-007")) {
		t.Fatal("not deterministic")
	}
	for _, g := range got {
		if name(g) == "node-007" {
			t.Fatal("a node is its own peer")
		}
		if !strings.Contains(g, "=10.0.") {
			t.Fatalf("target %q is not name=address", g)
		}
	}
	if got := newMesh(ps[:5], k).peersOf("node-000"); len(got) != 4 {
		t.Fatalf("5 nodes, k=8: %v, want a full mesh of the 4 others", got)
	}
	if got := newMesh(ps, k).peersOf("not-a-candidate"); len(got) < k-1 {
		t.Fatalf("a node without an address pings %v, want about %d", got, k)
	}
	if got := newMesh(ps, 0).peersOf("node-000"); len(got) != 0 {
		t.Fatalf("k=0: %v", got)
	}
	if got := newMesh(nil, k).peersOf("node-000"); len(got) != 0 {
		t.Fatalf("empty fleet: %v", got)
	}

	// Every node is pinged by the K it pings (a node is its neighbours'
	// neighbour), so by about K others.
	before := map[string][]string{}
	in := map[string]int{}
	for _, p := range ps {
		before[p.name] = m.peersOf(p.name)
		for _, g := range before[p.name] {
			in[name(g)]++
		}
	}
	lo, hi := len(ps), 0
	for _, p := range ps {
		lo, hi = min(lo, in[p.name]), max(hi, in[p.name])
		for _, g := range before[p.name] {
			if !slices.Contains(before[name(g)], p.name+"="+p.addr) {
				t.Fatalf("%s pings %s but not the other way round", p.name, g)
			}
		}
	}
	t.Logf("200 nodes, k=%d: each pinged by %d to %d others", k, lo, hi)
	if lo < k-2 || hi > k {
		t.Errorf("in-degree from %d to %d, want about %d", lo, hi, k)
	}

	// Stable: a node joining changes one peer of at most K nodes.
	m2 := newMesh(append(slices.Clone(ps), peer{name: "node-new", addr: "10.9.9.9"}), k)
	changed := 0
	for _, p := range ps {
		diff := 0
		for _, g := range m2.peersOf(p.name) {
			if !slices.Contains(before[p.name], g) {
				diff++
			}
		}
		if diff > 1 {
			t.Fatalf("%s: %d peers changed when one node joined", p.name, diff)
		}
		changed += diff
	}
	t.Logf("a node joining 200 changed %d peer sets", changed)
	if changed > k {
		t.Errorf("%d peer sets changed on one join, want at most %d", changed, k)
	}

	// An odd K: the last ring gives a successor only.
	if got := newMesh(ps, 3).peersOf("node-001"); len(got) < 2 || len(got) > 3 {
		t.Errorf("k=3: %v", got)
	}
}

type fakePusher struct {
	mu     sync.Mutex
	pushes int
}

func (f *fakePusher) PushConfig(context.Context, ...string) {
	f.mu.Lock()
	f.pushes++
	f.mu.Unlock()
}

func (f *fakePusher) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pushes
}

// The collector hands each node the others that announce a ping address,
// and when a node joins (or changes its address) it pushes new peer sets
// to everyone, once per burst.
func TestConfigForHandsOutPeers(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	var err error
	svc := New(st, slog.New(slog.DiscardHandler))
	push := &fakePusher{}
	svc.SetPusher(push)

	hello := func(name, addr string) store.Node {
		t.Helper()
		n := store.Node{Name: name, InstanceID: 1, IntervalMS: 1000, PingAddress: addr}
		if n.ID, err = st.UpsertNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	targets := func(n store.Node) string {
		t.Helper()
		cfg, err := svc.ConfigFor(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(cfg.GetPingTargets(), ",")
	}

	a := hello("a", "198.18.0.1")
	if got := targets(a); got != "" {
		t.Fatalf("a alone: targets %q", got)
	}
	b := hello("b", "198.18.0.2")
	if got := targets(b); got != "a=198.18.0.1" {
		t.Fatalf("b: targets %q", got)
	}
	if got := targets(a); got != "b=198.18.0.2" {
		t.Fatalf("a after b joined: targets %q", got)
	}
	c := hello("c", "") // pings, is not pinged
	if got := targets(c); got != "a=198.18.0.1,b=198.18.0.2" && got != "b=198.18.0.2,a=198.18.0.1" {
		t.Fatalf("c: targets %q", got)
	}
	if got := targets(a); got != "b=198.18.0.2" {
		t.Fatalf("a must not ping c, which has no address: %q", got)
	}
	deadline := time.Now().Add(peerPushDelay + 5*time.Second)
	for push.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := push.count(); n != 1 {
		t.Fatalf("%d pushes after b joined, want 1 (coalesced)", n)
	}
	b = hello("b", "198.18.0.22")
	if got := targets(b); got != "a=198.18.0.1" {
		t.Fatalf("b: targets %q", got)
	}
	if got := targets(a); got != "b=198.18.0.22" {
		t.Fatalf("a after b's address changed: targets %q", got)
	}
	svc.SetPingPeers(-1)
	if got := targets(a); got != "" {
		t.Fatalf("mesh off: targets %q", got)
	}
}

// A customer's nodes ping only each other: a ping target is named after its
// peer, and one customer must never see another's node names.
func TestPeersStayWithinACustomer(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	var err error
	svc := New(st, slog.New(slog.DiscardHandler))
	svc.SetPusher(&fakePusher{})
	nodes := map[string]store.Node{}
	for _, n := range []store.Node{
		{Name: "acme-1", PingAddress: "198.18.1.1", Labels: map[string]string{"customer": "acme"}},
		{Name: "acme-2", PingAddress: "198.18.1.2", Labels: map[string]string{"customer": "acme", "rack": "r2"}},
		{Name: "globex-1", PingAddress: "198.18.2.1", Labels: map[string]string{"customer": "globex"}},
		{Name: "infra-1", PingAddress: "198.18.3.1"},
		{Name: "infra-2", PingAddress: "198.18.3.2", Labels: map[string]string{"rack": "r1"}},
	} {
		n.InstanceID, n.IntervalMS = 1, 1000
		n.Tenant = n.Labels["customer"] // what ingest derives from the bound tenant label
		if n.ID, err = st.UpsertNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		nodes[n.Name] = n
	}
	for name, want := range map[string]string{
		"acme-1":   "acme-2=198.18.1.2",
		"acme-2":   "acme-1=198.18.1.1",
		"globex-1": "",
		"infra-1":  "infra-2=198.18.3.2",
		"infra-2":  "infra-1=198.18.3.1",
	} {
		cfg, err := svc.ConfigFor(ctx, nodes[name])
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(cfg.GetPingTargets(), ","); got != want {
			t.Errorf("%s pings %q, want %q", name, got, want)
		}
	}
	// Moving a node to another customer moves it to that mesh.
	moved := nodes["globex-1"]
	moved.Labels, moved.Tenant = map[string]string{"customer": "acme"}, "acme"
	if _, err := st.UpsertNode(ctx, moved); err != nil {
		t.Fatal(err)
	}
	cfg, err := svc.ConfigFor(ctx, moved)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.GetPingTargets(); len(got) != 2 {
		t.Errorf("globex-1, now acme's, pings %v; want acme-1 and acme-2", got)
	}
}

// The tenancy checks of ping targets: a target named after another
// tenant's node is foreign, whoever's mesh it came from; one named after a
// node of the same tenant, or after no node, is not. A node announcing a
// ping address another tenant's node announced first is no ping peer.
func TestForeignPingTargetsAndTakenAddresses(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	var err error
	svc := New(st, slog.New(slog.DiscardHandler))
	svc.SetPusher(&fakePusher{})
	metrics := telemetry.New()
	svc.SetMetrics(metrics)
	nodes := map[string]store.Node{}
	for _, n := range []store.Node{
		{Name: "acme-1", PingAddress: "198.18.1.1", Tenant: "acme"},
		{Name: "acme-2", PingAddress: "198.18.1.2", Tenant: "acme"},
		{Name: "globex-db-1", PingAddress: "10.77.0.21", Tenant: "globex"},
		{Name: "globex-2", PingAddress: "198.18.2.2", Tenant: "globex"},
		// Announces acme-2's address, after acme-2 did.
		{Name: "globex-3", PingAddress: "198.18.1.2", Tenant: "globex"},
		{Name: "infra-1", Tenant: ""},
	} {
		n.InstanceID, n.IntervalMS = 1, 1000
		n.Labels = map[string]string{"customer": n.Tenant}
		if n.ID, err = st.UpsertNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		nodes[n.Name] = n
	}
	targets := func(names ...string) []ingest.PingTarget {
		var out []ingest.PingTarget
		for _, n := range names {
			out = append(out, ingest.PingTarget{ID: "ping/" + n, Name: n})
		}
		return out
	}
	for _, c := range []struct {
		tenant string
		ask    []string
		want   []string
	}{
		{"acme", []string{"acme-2", "globex-db-1", "gw", "10.77.0.21", "infra-1"}, []string{"ping/globex-db-1", "ping/infra-1"}},
		{"globex", []string{"acme-1", "globex-db-1", "globex-3"}, []string{"ping/acme-1"}},
		{"", []string{"acme-1", "infra-1"}, []string{"ping/acme-1"}},
	} {
		got, err := svc.ForeignPingTargets(ctx, store.Node{Name: "asking", Tenant: c.tenant}, targets(c.ask...))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("tenant %q asking about %v: foreign %v, %v; want %v", c.tenant, c.ask, got, err, c.want)
		}
	}
	for name, want := range map[string]string{
		"acme-1":      "acme-2=198.18.1.2",
		"globex-2":    "globex-db-1=10.77.0.21",
		"globex-db-1": "globex-2=198.18.2.2",
	} {
		cfg, err := svc.ConfigFor(ctx, nodes[name])
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(cfg.GetPingTargets(), ","); got != want {
			t.Errorf("%s pings %q, want %q (globex-3 announced acme-2's address: no peer)", name, got, want)
		}
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	taken := -1.0
	for _, f := range families {
		if f.GetName() == "nbs_collector_ping_addresses_taken" {
			taken = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if taken != 1 {
		t.Errorf("nbs_collector_ping_addresses_taken is %v, want 1 (globex-3)", taken)
	}
}

// Hellos of new nodes, which the cached fleet cannot reflect (the tenancy
// check runs before their node is stored), share reads of the fleet rather
// than each reading it in turn (which made registering a fleet quadratic);
// and each still sees the fleet as it was when it asked: a node of another
// tenant stored just before is foreign at once.
func TestNewNodesShareFleetReads(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	var err error
	svc := New(st, slog.New(slog.DiscardHandler))
	svc.SetPusher(&fakePusher{})
	for i := range 50 {
		n := store.Node{Name: fmt.Sprintf("acme-%d", i), PingAddress: fmt.Sprintf("198.18.0.%d", i), Tenant: "acme",
			InstanceID: 1, IntervalMS: 1000, Labels: map[string]string{"customer": "acme"}}
		if _, err := st.UpsertNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	target := []ingest.PingTarget{{ID: "ping/acme-1", Name: "acme-1"}}
	if _, err := svc.ForeignPingTargets(ctx, store.Node{Name: "first", Tenant: "acme"}, target); err != nil {
		t.Fatal(err)
	}
	readsBefore := func() int { svc.peers.mu.Lock(); defer svc.peers.mu.Unlock(); return svc.peers.reads }()
	const hellos = 64
	var wg sync.WaitGroup
	errs := make(chan error, hellos)
	for i := range hellos {
		wg.Go(func() {
			got, err := svc.ForeignPingTargets(ctx, store.Node{Name: fmt.Sprintf("new-%d", i), Tenant: "acme"}, target)
			if err == nil && len(got) != 0 {
				err = fmt.Errorf("new-%d: foreign %v, want none", i, got)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	svc.peers.mu.Lock()
	reads := svc.peers.reads - readsBefore
	svc.peers.mu.Unlock()
	// Callers arriving while a read runs share the next: a handful of
	// reads, however many Hellos.
	if reads < 1 || reads > hellos/4 {
		t.Errorf("%d Hellos of new nodes read the fleet %d times, want from 1 to %d", hellos, reads, hellos/4)
	}
	// Stored after the cache's last read: a new node's Hello still sees it.
	moved := store.Node{Name: "globex-1", PingAddress: "198.18.9.1", Tenant: "globex", InstanceID: 1, IntervalMS: 1000,
		Labels: map[string]string{"customer": "globex"}}
	if _, err := st.UpsertNode(ctx, moved); err != nil {
		t.Fatal(err)
	}
	got, err := svc.ForeignPingTargets(ctx, store.Node{Name: "new-late", Tenant: "acme"}, []ingest.PingTarget{{ID: "ping/globex-1", Name: "globex-1"}})
	if err != nil || !slices.Equal(got, []string{"ping/globex-1"}) {
		t.Errorf("a node of another tenant stored just before: foreign %v, %v; want [ping/globex-1]", got, err)
	}
}

// A push of new peer sets waits for the fleet's peers to be still for
// peerPushDelay, and no longer than peerPushMaxDelay after the first
// change: a fleet registering for a minute gets a push or two, not one
// every peerPushDelay.
func TestPushWaitsForTheFleetToSettle(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	cases := []struct {
		name             string
		first, last, now time.Duration // after t0
		want             time.Duration
	}{
		{"one change, its delay passed", 0, 0, peerPushDelay, 0},
		{"one change, waiting", 0, 0, time.Second, peerPushDelay - time.Second},
		{"changes still coming", 0, 4 * time.Second, peerPushDelay, 4 * time.Second},
		{"still for the delay since the last", 0, 10 * time.Second, 10*time.Second + peerPushDelay, 0},
		{"changes for longer than the cap", 0, peerPushMaxDelay - time.Second, peerPushMaxDelay - time.Second, time.Second},
		{"the cap reached", 0, peerPushMaxDelay, peerPushMaxDelay, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := max(pushWait(t0.Add(c.first), t0.Add(c.last), t0.Add(c.now)), 0)
			if got != c.want {
				t.Errorf("pushWait = %s, want %s", got, c.want)
			}
		})
	}
}

// A node is a candidate peer while its last Hello or its last report is
// recent (peerMaxAge): a node connected for days says Hello only once, and
// one that went silent leaves the mesh.
func TestPeersAreFreshByHelloOrReport(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	svc := New(st, slog.New(slog.DiscardHandler))
	pool := st.Pool()
	old := time.Now().Add(-2 * peerMaxAge)
	cases := []struct {
		name   string
		hello  time.Time
		report time.Time // zero: none
		want   bool
	}{
		{"hello-now", time.Now(), time.Time{}, true},
		{"hello-old-report-now", old, time.Now(), true},
		{"hello-old-no-report", old, time.Time{}, false},
		{"hello-old-report-old", old, old, false},
	}
	for _, c := range cases {
		id, err := st.UpsertNode(ctx, store.Node{Name: c.name, InstanceID: 1, IntervalMS: 1000, PingAddress: "198.18.1." + strconv.Itoa(len(c.name))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE nodes SET last_hello = $2 WHERE id = $1`, id, c.hello); err != nil {
			t.Fatal(err)
		}
		if !c.report.IsZero() {
			if _, err := pool.Exec(ctx, `INSERT INTO node_latest (node_id, ts, interval_ms, metrics) VALUES ($1, $2, 1000, '{}')`, id, c.report); err != nil {
				t.Fatal(err)
			}
		}
	}
	list, _, err := svc.peers.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if got := slices.ContainsFunc(list, func(p peer) bool { return p.name == c.name }); got != c.want {
			t.Errorf("%s a candidate peer: %v, want %v", c.name, got, c.want)
		}
	}
}
