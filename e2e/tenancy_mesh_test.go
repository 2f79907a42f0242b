package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/collector/access"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/tenant"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// meshAgent is an agent that keeps every ping peer it was ever given, as
// an agent of an older version did (or a hostile one would): its Hellos
// define them, one of them only in its reports' new_metrics (as a spooled
// report resent on a new stream does), and its reports measure them all,
// lost and CRIT, whatever its tenant is now.
type meshAgent struct {
	*tenantAgent
	kept     map[string]string // peer name → address
	late     string            // the peer defined only in a report
	lateSent bool              // on this stream
}

func pingTargetDefs(name, addr string) []*nbsv1.MetricDefinition {
	return []*nbsv1.MetricDefinition{
		{Id: "ping/" + name, Title: fmt.Sprintf("RTT to %s (%s)", name, addr), Unit: "ms", Kind: nbsv1.MetricKind_METRIC_KIND_HISTOGRAM, Scale: 1e6, Quantile: 0.99},
		{Id: "ping/" + name + "/loss", Title: "Loss", Unit: "%", Kind: nbsv1.MetricKind_METRIC_KIND_GAUGE},
	}
}

// reconnect opens a new stream whose Hello defines the kept peers but
// the late one.
func (a *meshAgent) reconnect(token string) {
	a.t.Helper()
	a.extra = []*nbsv1.MetricDefinition{{Id: "ping", Title: "Ping", Unit: "ms", Kind: nbsv1.MetricKind_METRIC_KIND_GAUGE}}
	for _, p := range sortedKeys(a.kept) {
		if p != a.late {
			a.extra = append(a.extra, pingTargetDefs(p, a.kept[p])...)
		}
	}
	a.lateSent = false
	if err := a.connect(token, ""); err != nil {
		a.t.Fatalf("%s connecting: %v", a.name, err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// measure reports every kept peer lost (CRIT), the late one's definitions
// with it the first time on a stream, and waits for the ack.
func (a *meshAgent) measure() {
	a.t.Helper()
	a.seq++
	r := &nbsv1.Report{Sequence: a.seq, TimeUnixNano: time.Now().UnixNano(), IntervalMs: 1000,
		Samples: []*nbsv1.Sample{{MetricId: "tcp_reset", State: nbsv1.State_STATE_OK}, {MetricId: "ping", Value: 80, State: nbsv1.State_STATE_CRIT}}}
	if a.late != "" && !a.lateSent {
		r.NewMetrics = pingTargetDefs(a.late, a.kept[a.late])
		a.lateSent = true
	}
	for i, p := range sortedKeys(a.kept) {
		r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: "ping/" + p, Value: float64(10 + i), State: nbsv1.State_STATE_CRIT},
			&nbsv1.Sample{MetricId: "ping/" + p + "/loss", Value: float64(50 + i), State: nbsv1.State_STATE_CRIT})
		r.Histograms = append(r.Histograms, &nbsv1.Histogram{MetricId: "ping/" + p, Count: 2, Sum: 2e7, BucketIndex: []uint32{900}, BucketCount: []uint64{2}})
		r.Events = append(r.Events, &nbsv1.Event{MetricId: "ping/" + p + "/loss", TimeUnixNano: time.Now().UnixNano(),
			Fields: map[string]string{"dst": a.kept[p], "peer": p}})
	}
	a.sendAcked(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: r}})
}

// waitEnded waits for the collector to end the agent's stream (an
// operator changed its labels).
func (a *meshAgent) waitEnded() {
	a.t.Helper()
	for {
		if _, err := a.stream.Recv(); err != nil {
			if !strings.Contains(err.Error(), "changed by an operator") {
				a.t.Errorf("%s's stream ended with %v; want the operator's change", a.name, err)
			}
			return
		}
	}
}

// nodesLabel is `nbs-collector nodes label NODE LABELS`: the subcommand's
// own code, on the database, with no collector in its process (running
// collectors hear of it through PostgreSQL).
func nodesLabel(t *testing.T, dbURL, node, labels string) {
	t.Helper()
	ctx := access.WithPrincipal(context.Background(), access.CLIPrincipal())
	sel, err := access.ParseSelector(labels)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, dbURL, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := nodeauth.NewAdmin(st, nil, "", tenant.DefaultKey, log).Label(ctx, node, sel); err != nil {
		t.Fatalf("nodes label %s %s: %v", node, labels, err)
	}
}

// seesNoneOf reads, as token, every view a customer has of its nodes —
// fleet, node, tree, thresholds, evidence, series, alerts, report (JSON and
// CSV; the printed page is drawn from the JSON) — and fails on any that
// names one of forbidden (another tenant's node names and addresses).
// own maps each of its nodes to a ping target the node keeps that is its
// own tenant's, which its tree and report must show: the reads are not
// empty.
func seesNoneOf(t *testing.T, col *collector, who, token string, own map[string]string, forbidden []string) {
	t.Helper()
	from := time.Now().Add(-time.Hour)
	paths := []string{"/api/v1/nodes", "/api/v1/fleet", "/api/v1/alerts",
		"/api/v1/reports?from=" + url.QueryEscape(from.UTC().Format(time.RFC3339)),
		"/api/v1/reports?format=csv&from=" + url.QueryEscape(from.UTC().Format(time.RFC3339))}
	for _, n := range sortedKeys(own) {
		paths = append(paths, "/api/v1/nodes/"+n, "/api/v1/nodes/"+n+"/tree", "/api/v1/nodes/"+n+"/thresholds",
			fmt.Sprintf("/api/v1/nodes/%s/events?metric=ping&from=%d", n, from.UnixMilli()))
	}
	bodies := map[string]string{}
	for _, p := range paths {
		code, b := as(t, col, token, http.MethodGet, p, "")
		if code != http.StatusOK {
			t.Errorf("%s: GET %s: HTTP %d %.300s", who, p, code, b)
			continue
		}
		bodies[p] = string(b)
		for _, f := range forbidden {
			if i := strings.Index(string(b), f); i >= 0 {
				t.Errorf("%s: GET %s names another tenant's %q: …%s…", who, p, f, b[max(0, i-120):min(len(b), i+120)])
			}
		}
	}
	for n, peer := range own {
		if !strings.Contains(bodies["/api/v1/nodes/"+n+"/tree"], `"ping/`+peer+`"`) {
			t.Errorf("%s: %s's tree lacks its own tenant's peer %s", who, n, peer)
		}
		for _, f := range forbidden {
			if code, _ := as(t, col, token, http.MethodGet, fmt.Sprintf("/api/v1/nodes/%s/series?metric=ping/%s/loss&from=%d", n, f, from.UnixMilli()), ""); code != http.StatusNotFound && code != http.StatusBadRequest {
				t.Errorf("%s: the series of %s's ping/%s/loss answers HTTP %d, want 404", who, n, f, code)
			}
		}
	}
	if !strings.Contains(bodies[paths[3]], `"target": "`) {
		t.Errorf("%s: the report has no ping target at all: the check proves nothing", who)
	}
}

// Agents in one mesh, then bound to two tenants by `nbs-collector nodes
// label`: from the first report after the binding, neither tenant's tree,
// evidence, series, thresholds, alerts or report names the other's nodes
// or addresses, though the agents keep pinging (and reporting) every peer
// of the old mesh. The same holds after a node moves to the other tenant
// and back, and each tenant reads that node's history of its own periods
// by name: acme the time before the move and after the return, globex the
// time between.
func TestNoTenantSeesAnothersNodes(t *testing.T) {
	t.Parallel()
	db := pgcluster.Database(t)
	col := startCollector(t, db, "127.0.0.1:0", enrollWith(tokenFile(t)), func(c *collectorapp.Config) { c.NodeAuth.Mode = "enroll" })
	addr := map[string]string{"acme-web-1": "198.18.7.1", "acme-db-1": "198.18.7.2", "globex-web-1": "198.18.7.3", "globex-db-1": "198.18.7.4"}
	agents := map[string]*meshAgent{}
	for _, name := range sortedKeys(addr) {
		a := &meshAgent{tenantAgent: &tenantAgent{t: t, addr: col.grpcAddr, name: name, ping: addr[name]}, kept: map[string]string{}}
		a.reconnect(fleetToken)
		agents[name] = a
	}
	// One mesh: nothing is bound yet. Each agent learns the other three
	// and keeps them from now on.
	for _, a := range agents {
		a.reconnect("")
		if got := a.pingTargets(); len(got) != 3 {
			t.Fatalf("%s pings %v in the unbound mesh; want the 3 others", a.name, got)
		}
		for _, spec := range a.config.GetPingTargets() {
			n, ad, _ := strings.Cut(spec, "=")
			a.kept[n] = ad
		}
		// The last of another tenant's kept peers reaches the collector
		// only in a report's new_metrics.
		for _, p := range sortedKeys(a.kept) {
			if strings.SplitN(p, "-", 2)[0] != strings.SplitN(a.name, "-", 2)[0] {
				a.late = p
			}
		}
		a.reconnect("")
		a.measure()
	}

	for _, name := range sortedKeys(addr) {
		nodesLabel(t, db, name, "customer="+strings.SplitN(name, "-", 2)[0])
		agents[name].waitEnded()
	}
	for _, name := range sortedKeys(agents) {
		a := agents[name]
		a.reconnect("")
		a.measure()
	}
	agents["acme-db-1"].resets(3, 1001)
	acme, globex := customerToken(t, col, "acme"), customerToken(t, col, "globex")
	acmeOnly := []string{"acme-web-1", "acme-db-1", addr["acme-web-1"], addr["acme-db-1"]}
	globexOnly := []string{"globex-web-1", "globex-db-1", addr["globex-web-1"], addr["globex-db-1"]}
	seesNoneOf(t, col, "acme after the binding", acme, map[string]string{"acme-web-1": "acme-db-1", "acme-db-1": "acme-web-1"}, globexOnly)
	seesNoneOf(t, col, "globex after the binding", globex, map[string]string{"globex-web-1": "globex-db-1", "globex-db-1": "globex-web-1"}, acmeOnly)
	// The alerts checked are there: the ping roots the agents reported
	// CRIT fired for each tenant, explained by what they may see.
	for who, token := range map[string]string{"acme": acme, "globex": globex} {
		eventually(t, 10*time.Second, func() string {
			if _, b := as(t, col, token, http.MethodGet, "/api/v1/alerts", ""); !strings.Contains(string(b), `"root": "ping"`) {
				return fmt.Sprintf("%s has no alert of a ping root: %.400s", who, b)
			}
			return ""
		})
	}
	// Not stored at all: staff's tree of the node has no such child either.
	var staffTree treeResp
	col.getJSON(t, "/api/v1/nodes/acme-web-1/tree", &staffTree)
	for _, f := range []string{"globex-web-1", "globex-db-1"} {
		if staffTree.find("ping/"+f) != nil {
			t.Errorf("acme-web-1's stored tree has ping/%s: another tenant's node was stored", f)
		}
	}

	// History stored before the collector refused such targets (by an
	// older version) is not served either: acme-web-1 gets globex-db-1's
	// subtree, a report of it and its evidence written straight into the
	// store.
	storeForeignHistory(t, db, "acme-web-1", "globex-db-1", addr["globex-db-1"])
	seesNoneOf(t, col, "acme over older history", acme, map[string]string{"acme-web-1": "acme-db-1", "acme-db-1": "acme-web-1"}, globexOnly)
	var stored treeResp
	col.getJSON(t, "/api/v1/nodes/acme-web-1/tree", &stored)
	if stored.find("ping/globex-db-1") == nil {
		t.Error("the older history was not stored: the check above proves nothing")
	}

	// acme-db-1 moves to globex; its agent keeps naming acme-web-1, and
	// resends on its new stream a report of acme's time it had not had
	// acked: it stays acme's.
	db1 := agents["acme-db-1"]
	beforeMove := time.Now()
	nodesLabel(t, db, "acme-db-1", "customer=globex")
	db1.waitEnded()
	db1.reconnect("")
	db1.resetsAt(2, 1999, beforeMove)
	db1.measure()
	db1.resets(5, 2002)
	agents["acme-web-1"].measure()
	seesNoneOf(t, col, "globex after the move", globex, map[string]string{"acme-db-1": "globex-web-1", "globex-web-1": "globex-db-1"},
		[]string{"acme-web-1", addr["acme-web-1"]})
	seesNoneOf(t, col, "acme after the move", acme, map[string]string{"acme-web-1": "acme-db-1"}, globexOnly)

	// And back to acme.
	nodesLabel(t, db, "acme-db-1", "customer=acme")
	db1.waitEnded()
	db1.reconnect("")
	db1.measure()
	db1.resets(7, 3003)
	seesNoneOf(t, col, "acme after the move back", acme, map[string]string{"acme-db-1": "acme-web-1", "acme-web-1": "acme-db-1"}, globexOnly)
	seesNoneOf(t, col, "globex after the move back", globex, map[string]string{"globex-web-1": "globex-db-1"}, []string{"acme-web-1", addr["acme-web-1"]})

	before, between := look(t, col, acme, "acme-db-1"), look(t, col, globex, "acme-db-1")
	if before.code != http.StatusOK || before.resets != 12 || !slices.Equal(before.ports, []string{"1001", "1999", "3003"}) || before.tenant != "acme" {
		t.Errorf("acme reads acme-db-1 as HTTP %d, tenant %q, %v resets from ports %v; want its own periods: 3+2 before the move (2 resent after it) and 7 after the return",
			before.code, before.tenant, before.resets, before.ports)
	}
	if between.code != http.StatusOK || between.resets != 5 || !slices.Equal(between.ports, []string{"2002"}) {
		t.Errorf("globex reads acme-db-1 as HTTP %d, %v resets from ports %v; want only its period: 5 from port 2002",
			between.code, between.resets, between.ports)
	}
}

// storeForeignHistory writes, as a collector before this version stored
// it, a ping target of node naming another tenant's node peer: its
// definitions, a report measuring it and its evidence.
func storeForeignHistory(t *testing.T, dbURL, node, peer, peerAddr string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := st.NodeByName(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	root := "ping/" + peer
	ids, err := st.UpsertDefinitions(ctx, n.ID, []store.MetricDef{
		{Path: root, Title: fmt.Sprintf("RTT to %s (%s)", peer, peerAddr), Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
		{Path: root + "/loss", Title: "Loss", Unit: "%", Kind: store.KindGauge, Scale: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := st.WriteReports(ctx, []store.Report{{NodeID: n.ID, InstanceID: 42, Seq: 1 << 20, Time: now, Received: now, IntervalMS: 1000,
		Samples: []store.Sample{{MetricID: ids[root], Path: root, Value: 99, State: store.StateCrit},
			{MetricID: ids[root+"/loss"], Path: root + "/loss", Value: 90, State: store.StateCrit}},
		Histograms: []store.Histogram{{MetricID: ids[root], Path: root, Count: 3, Sum: 3e7, BucketIndex: []int32{900}, BucketCount: []int64{3}}},
		Events:     []store.Event{{MetricID: ids[root+"/loss"], Path: root + "/loss", Time: now, Fields: map[string]string{"dst": peerAddr, "peer": peer}}},
	}}); err != nil {
		t.Fatal(err)
	}
}

// Real agents in one mesh, then bound to two tenants by `nbs-collector
// nodes label`: each forgets the peer the collector no longer gives it
// (its later Hellos define only what it still pings), and the collector
// stores nothing of what the Hello of its new stream, sent before the
// Config, still says of it: neither the tenant nor staff read the other
// tenant's node in the tree of the new tenant's row. (That the agent
// forgets when the Config arrives rather than at its next collection is
// agent/app's TestPeersTakenAwayAreForgottenAtOnce.)
func TestAgentsForgetPeersOfAnotherTenant(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	db := pgcluster.Database(t)
	col := startCollector(t, db, "127.0.0.1:0")
	agents := map[string]*agent{}
	for _, n := range []struct {
		name, ns string
		addr     netip.Addr
	}{{"lab-a", lab.A, lab.IPA}, {"lab-b", lab.B, lab.IPB}} {
		agents[n.name] = startAgent(t, n.name, n.ns, col.grpcAddr, func(c *agentapp.Config) {
			c.BPF = false // ICMP only
			c.PingAddress, c.PingInterval = n.addr.String(), 100*time.Millisecond
		})
	}
	waitNode(t, col, "lab-a")
	waitNode(t, col, "lab-b")
	eventually(t, 30*time.Second, func() string {
		if tr := pingTree(t, col, "lab-a"); tr.find("ping/lab-b") == nil {
			return "lab-a does not ping lab-b yet (one mesh)"
		}
		return ""
	})
	nodesLabel(t, db, "lab-a", "customer=acme")
	nodesLabel(t, db, "lab-b", "customer=globex")
	defines := func(a *agent, prefix string) bool {
		return slices.ContainsFunc(a.Hello().GetMetrics(), func(m *nbsv1.MetricDefinition) bool { return strings.HasPrefix(m.GetId(), prefix) })
	}
	took := eventually(t, 30*time.Second, func() string {
		for name, other := range map[string]string{"lab-a": "ping/lab-b", "lab-b": "ping/lab-a"} {
			if defines(agents[name], other) {
				return fmt.Sprintf("%s's agent still defines %s", name, other)
			}
		}
		return ""
	})
	t.Logf("both agents forgot the other tenant's node %s after the binding", took.Round(time.Millisecond))
	acme, globex := customerToken(t, col, "acme"), customerToken(t, col, "globex")
	for _, c := range []struct{ token, node, other string }{{acme, "lab-a", "lab-b"}, {globex, "lab-b", "lab-a"}} {
		// The new tenant's row has a report: what is read is the tree the
		// agent reports now.
		eventually(t, 20*time.Second, func() string {
			code, b := as(t, col, c.token, http.MethodGet, "/api/v1/nodes/"+c.node+"/tree", "")
			if code != http.StatusOK || !strings.Contains(string(b), `"time"`) {
				return fmt.Sprintf("%s's tree for its tenant: HTTP %d %.200s", c.node, code, b)
			}
			return ""
		})
		for who, token := range map[string]string{"its tenant": c.token, "staff": col.token} {
			_, b := as(t, col, token, http.MethodGet, "/api/v1/nodes/"+c.node+"/tree", "")
			if strings.Contains(string(b), c.other) {
				t.Errorf("%s's tree after the binding, read by %s, names %s", c.node, who, c.other)
			}
		}
	}
}
