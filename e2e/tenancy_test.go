package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// tenantAgent is a raw agent of the tenancy tests: it enrolls with a
// bootstrap token (keeping the credential it is given), claims whatever
// labels a test makes it claim, announces a ping address, and reports
// resets with their evidence.
type tenantAgent struct {
	t          *testing.T
	addr, name string
	ping       string
	cred       string
	seq        uint64
	stream     nbsv1.AgentService_ConnectClient
	cancel     context.CancelFunc
	config     *nbsv1.Config
	// extra are definitions its Hellos carry besides tenantHello's.
	extra []*nbsv1.MetricDefinition
}

func tenantHello(name string, labels map[string]string, auth *nbsv1.NodeAuth, pingAddr string) *nbsv1.ConnectRequest {
	h := hello(name)
	h.GetHello().Labels, h.GetHello().Auth, h.GetHello().PingAddress = labels, auth, pingAddr
	h.GetHello().Metrics = append(h.GetHello().Metrics,
		&nbsv1.MetricDefinition{Id: "tcp_reset/sent/no_socket", Title: "No socket", Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE})
	return h
}

// connect opens a stream: with the agent's credential once it has one,
// else with token. It returns the refusal, or nil once the Config came.
func (a *tenantAgent) connect(token, claimTenant string) error {
	a.t.Helper()
	labels := map[string]string{"rack": "r1"}
	if claimTenant != "" {
		labels["customer"] = claimTenant
	}
	return a.connectWith(token, labels)
}

// connectWith is connect with the Hello's labels.
func (a *tenantAgent) connectWith(token string, labels map[string]string) error {
	a.t.Helper()
	if a.cancel != nil {
		a.cancel()
	}
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		a.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = func() { cancel(); conn.Close() }
	a.t.Cleanup(a.cancel)
	var auth *nbsv1.NodeAuth
	switch {
	case a.cred != "":
		auth = credentialProof(a.cred)
	case token != "":
		auth = tokenProof(token)
	}
	if a.stream, err = nbsv1.NewAgentServiceClient(conn).Connect(ctx); err != nil {
		return err
	}
	h := tenantHello(a.name, labels, auth, a.ping)
	h.GetHello().Metrics = append(h.GetHello().Metrics, a.extra...)
	if err := a.stream.Send(h); err != nil {
		return err
	}
	for {
		m, err := a.stream.Recv()
		if err != nil {
			return err
		}
		if e := m.GetEnrolled(); e != nil {
			a.cred = e.GetNodeCredential()
		}
		if c := m.GetConfig(); c != nil {
			a.config = c
			return nil
		}
	}
}

// resets reports n resets sent to port with one event each, and waits
// for the ack.
func (a *tenantAgent) resets(n int, port int) {
	a.t.Helper()
	a.resetsAt(n, port, time.Now())
}

// resetsAt is resets in a report of time at (a report resent from the
// agent's spool is older than its stream).
func (a *tenantAgent) resetsAt(n int, port int, at time.Time) {
	a.t.Helper()
	a.seq++
	r := report(a.seq, sample("tcp_reset", float64(n)), sample("tcp_reset/sent", float64(n)), sample("tcp_reset/sent/no_socket", float64(n)))
	r.GetReport().TimeUnixNano = at.UnixNano()
	for i := range n {
		r.GetReport().Events = append(r.GetReport().Events, &nbsv1.Event{MetricId: "tcp_reset/sent/no_socket", TimeUnixNano: at.UnixNano(),
			Fields: map[string]string{"src": fmt.Sprintf("10.0.0.5:%d", port), "dst": fmt.Sprintf("10.0.0.9:%d", 40000+i), "protocol": "tcp", "reason": "NO_SOCKET"}})
	}
	a.sendAcked(r)
}

// sendAcked sends report r (sequence a.seq) and waits for its ack.
func (a *tenantAgent) sendAcked(r *nbsv1.ConnectRequest) {
	if err := a.stream.Send(r); err != nil {
		a.t.Fatalf("%s: send report: %v", a.name, err)
	}
	for {
		m, err := a.stream.Recv()
		if err != nil {
			a.t.Fatalf("%s: waiting for the ack of %d: %v", a.name, a.seq, err)
		}
		if m.GetReject() != nil {
			a.t.Fatalf("%s: report %d rejected: %v", a.name, a.seq, m.GetReject())
		}
		if m.GetAck().GetSequence() == a.seq {
			return
		}
	}
}

// pingTargets are the names of the peers the agent's last Config tells it
// to ping.
func (a *tenantAgent) pingTargets() []string {
	var out []string
	for _, t := range a.config.GetPingTargets() {
		name, _, _ := strings.Cut(t, "=")
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// as calls the collector's API with a bearer token.
func as(t *testing.T, col *collector, token, method, path, body string) (int, []byte) {
	t.Helper()
	return col.callAs(t, token, method, path, body)
}

func customerToken(t *testing.T, col *collector, tenant string) string {
	t.Helper()
	return customerTokenOn(t, col, "customer", tenant)
}

func customerTokenOn(t *testing.T, col *collector, key, tenant string) string {
	t.Helper()
	code, body := col.call(t, http.MethodPost, "/api/v1/tokens", fmt.Sprintf(`{"name":"%s-portal","role":"customer","selector":{%q:%q}}`, tenant, key, tenant))
	if code != http.StatusCreated {
		t.Fatalf("customer token for %s: HTTP %d %s", tenant, code, body)
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		t.Fatalf("customer token for %s: %s", tenant, body)
	}
	return out.Token
}

// view is what a caller sees of the fleet and of one node: the names, and
// the node's stored resets and their evidence.
type view struct {
	fleet  []string
	code   int // of GET /nodes/{node}
	tenant string
	resets float64
	ports  []string // the evidence's source ports
	report []string // the nodes of a report over the last hour
	count  int64    // the report's reset count
}

func look(t *testing.T, col *collector, token, node string) view {
	t.Helper()
	var v view
	var fleet struct {
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
	}
	_, b := as(t, col, token, "GET", "/api/v1/nodes", "")
	if err := json.Unmarshal(b, &fleet); err != nil {
		t.Fatalf("fleet: %s", b)
	}
	for _, n := range fleet.Nodes {
		v.fleet = append(v.fleet, n.Name)
	}
	var rep struct {
		Scope struct {
			Nodes []string `json:"nodes"`
		} `json:"scope"`
		Reliability struct {
			Resets []struct {
				Count int64 `json:"count"`
			} `json:"resets"`
		} `json:"reliability"`
	}
	code, b := as(t, col, token, "GET", "/api/v1/reports?from="+url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)), "")
	if code != http.StatusOK {
		t.Fatalf("report: HTTP %d %s", code, b)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v: %.300s", err, b)
	}
	v.report = rep.Scope.Nodes
	for _, r := range rep.Reliability.Resets {
		v.count += r.Count
	}
	var n struct {
		Tenant string `json:"tenant"`
	}
	code, b = as(t, col, token, "GET", "/api/v1/nodes/"+node, "")
	v.code = code
	if code != http.StatusOK {
		return v
	}
	_ = json.Unmarshal(b, &n)
	v.tenant = n.Tenant
	from := time.Now().Add(-time.Hour).UnixMilli()
	var s seriesResp
	_, b = as(t, col, token, "GET", fmt.Sprintf("/api/v1/nodes/%s/series?metric=tcp_reset/sent/no_socket&from=%d", node, from), "")
	_ = json.Unmarshal(b, &s)
	for _, p := range s.Points {
		if p.Count != nil {
			v.resets += *p.Count
		}
	}
	var ev struct {
		Events []struct {
			Fields map[string]string `json:"fields"`
		} `json:"events"`
	}
	_, b = as(t, col, token, "GET", fmt.Sprintf("/api/v1/nodes/%s/events?metric=tcp_reset&from=%d", node, from), "")
	_ = json.Unmarshal(b, &ev)
	for _, e := range ev.Events {
		_, port, _ := strings.Cut(e.Fields["src"], ":")
		if !slices.Contains(v.ports, port) {
			v.ports = append(v.ports, port)
		}
	}
	slices.Sort(v.ports)
	return v
}

// With enrollment, which customer a node belongs to is the operator's:
// tenants' bootstrap tokens enroll into their tenant only, a node that
// claims another tenant in its Hello changes nothing (not its scope, any
// fleet, ping targets or report), and when an operator moves a node, each
// tenant sees exactly its own part of the node's history — tree, series,
// evidence and report.
func TestTenancyIsTheOperators(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", enrollWith(tokenFile(t)),
		func(c *collectorapp.Config) { c.NodeAuth.Mode = "enroll" })
	acmeToken, globexToken := readToken(t, tenantTokenFile(t, col, "acme")), readToken(t, tenantTokenFile(t, col, "globex"))
	agents := map[string]*tenantAgent{}
	// What each agent claims in its Hellos, whatever its tenant is.
	claims := map[string]string{"acme-1": "acme", "acme-2": "acme", "globex-1": "globex", "globex-2": "acme", "infra-1": "acme"}
	for i, n := range []struct{ name, token string }{
		{"acme-1", acmeToken}, {"acme-2", acmeToken}, {"globex-1", globexToken},
		// An agent of globex's fleet claiming acme: globex's token decides.
		{"globex-2", globexToken},
		// The fleet token binds no tenant: a node it enrolled is staff's only.
		{"infra-1", fleetToken},
	} {
		a := &tenantAgent{t: t, addr: col.grpcAddr, name: n.name, ping: fmt.Sprintf("198.18.0.%d", i+1)}
		if err := a.connect(n.token, claims[n.name]); err != nil {
			t.Fatalf("%s enrolling: %v", n.name, err)
		}
		agents[n.name] = a
	}
	acme, globex := customerToken(t, col, "acme"), customerToken(t, col, "globex")

	// A customer token must select on the tenant label.
	if code, body := col.call(t, http.MethodPost, "/api/v1/tokens", `{"name":"rack-portal","role":"customer","selector":{"rack":"r1"}}`); code != http.StatusBadRequest ||
		!strings.Contains(string(body), `must name the tenant label \"customer\"`) {
		t.Errorf("a customer token selecting rack only: HTTP %d %s; want 400 naming the tenant label", code, body)
	}
	// A tenant's token does not take a name an operator bound elsewhere.
	if code, body := col.call(t, http.MethodPut, "/api/v1/nodes/reserved-1/labels", `{"labels":{"customer":"acme"}}`); code != http.StatusOK {
		t.Fatalf("bind reserved-1 to acme: HTTP %d %s", code, body)
	}
	squatter := &tenantAgent{t: t, addr: col.grpcAddr, name: "reserved-1", ping: "198.18.9.9"}
	wantDenied(t, "globex's token enrolling a name bound to acme", squatter.connect(globexToken, "globex"), `is bound to customer=acme, and bootstrap token`)

	// The enrolled acme-2 reconnects with its credential claiming globex.
	claims["acme-2"] = "globex"
	wantTargets := map[string][]string{
		"acme-1": {"acme-2"}, "acme-2": {"acme-1"}, "globex-1": {"globex-2"}, "globex-2": {"globex-1"}, "infra-1": nil,
	}
	// A Config is computed at each Hello: reconnect every agent to read
	// its mesh as the fleet now is.
	for name, want := range wantTargets {
		a := agents[name]
		if err := a.connect("", claims[name]); err != nil {
			t.Fatalf("%s reconnecting: %v", name, err)
		}
		if got := a.pingTargets(); !slices.Equal(got, want) {
			t.Errorf("%s pings %v; want %v (no target across tenants)", name, got, want)
		}
	}
	for name, a := range agents {
		a.resets(3, 1000+len(name))
	}
	tenants := map[string]string{"acme-1": "acme", "acme-2": "acme", "globex-1": "globex", "globex-2": "globex", "infra-1": ""}
	var ids struct {
		Nodes []struct {
			Node    string            `json:"node"`
			Tenant  string            `json:"tenant"`
			Claimed map[string]string `json:"claimed_labels"`
		} `json:"nodes"`
	}
	col.getJSON(t, "/api/v1/node-identities", &ids)
	for _, n := range ids.Nodes {
		want, ok := tenants[n.Node]
		if !ok {
			continue
		}
		if n.Tenant != want {
			t.Errorf("%s's tenant is %q, want %q", n.Node, n.Tenant, want)
		}
		if differs := claims[n.Node] != want; differs != (n.Claimed["customer"] == claims[n.Node]) {
			t.Errorf("%s claimed customer=%s with tenant %q: node identities show claimed %v", n.Node, claims[n.Node], want, n.Claimed)
		}
	}
	for token, wantFleet := range map[string][]string{acme: {"acme-1", "acme-2"}, globex: {"globex-1", "globex-2"}} {
		v := look(t, col, token, "acme-2")
		if !slices.Equal(v.fleet, wantFleet) {
			t.Errorf("a customer's fleet is %v, want %v", v.fleet, wantFleet)
		}
		if !slices.Equal(v.report, wantFleet) {
			t.Errorf("a customer's report covers %v, want %v", v.report, wantFleet)
		}
		if v.count != 6 {
			t.Errorf("a customer's report counts %d resets, want its two nodes' 6", v.count)
		}
	}

	// The operator moves acme-1 to globex: its stream ends, and it
	// reconnects under its new tenant.
	a1 := agents["acme-1"]
	if code, body := col.call(t, http.MethodPut, "/api/v1/nodes/acme-1/labels", `{"labels":{"customer":"globex"}}`); code != http.StatusOK {
		t.Fatalf("move acme-1 to globex: HTTP %d %s", code, body)
	}
	if _, err := a1.stream.Recv(); err == nil || !strings.Contains(err.Error(), "changed by an operator") {
		t.Errorf("acme-1's stream after the move: %v; want it ended, saying the operator changed its labels", err)
	}
	if err := a1.connect("", "acme"); err != nil {
		t.Fatalf("acme-1 reconnecting after the move: %v", err)
	}
	if got, want := a1.pingTargets(), []string{"globex-1", "globex-2"}; !slices.Equal(got, want) {
		t.Errorf("acme-1, now globex's, pings %v; want %v", got, want)
	}
	a1.resets(5, 2000)

	before, after := look(t, col, acme, "acme-1"), look(t, col, globex, "acme-1")
	if before.code != http.StatusOK || before.resets != 3 || !slices.Equal(before.ports, []string{"1006"}) || before.tenant != "acme" {
		t.Errorf("acme sees acme-1 as HTTP %d, tenant %q, %v resets, evidence ports %v; want its history before the move: 3 resets from port 1006",
			before.code, before.tenant, before.resets, before.ports)
	}
	if after.code != http.StatusOK || after.resets != 5 || !slices.Equal(after.ports, []string{"2000"}) || after.tenant != "globex" {
		t.Errorf("globex sees acme-1 as HTTP %d, tenant %q, %v resets, evidence ports %v; want only what it reported since: 5 from port 2000",
			after.code, after.tenant, after.resets, after.ports)
	}
	if !slices.Contains(before.report, "acme-1") || before.count != 6 {
		t.Errorf("acme's report after the move: nodes %v, %d resets; want acme-1 and acme-2 with their 6", before.report, before.count)
	}
	if !slices.Contains(after.report, "acme-1") || after.count != 11 {
		t.Errorf("globex's report after the move: nodes %v, %d resets; want acme-1's 5 besides globex-1's and globex-2's 6", after.report, after.count)
	}
	// Staff see the node as it is now.
	var node struct {
		Tenant string `json:"tenant"`
	}
	if col.getJSON(t, "/api/v1/nodes/acme-1", &node); node.Tenant != "globex" {
		t.Errorf("staff see acme-1 in tenant %q, want globex", node.Tenant)
	}
	// The move is audited with the labels before and after.
	type entry struct {
		Action string            `json:"action"`
		Old    map[string]string `json:"old"`
		New    map[string]string `json:"new"`
	}
	var audit struct {
		Entries []entry `json:"entries"`
	}
	col.getJSON(t, "/api/v1/audit?object_kind=node&object_id=acme-1", &audit)
	moved := slices.ContainsFunc(audit.Entries, func(e entry) bool {
		return e.Action == "label" && e.Old["customer"] == "acme" && e.New["customer"] == "globex"
	})
	if !moved {
		t.Errorf("the audit log does not record the move of acme-1 from acme to globex: %+v", audit.Entries)
	}
}

func readToken(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A deployment whose tenant label is another key (--tenant.label=tenant):
// the ping mesh, customer tokens and reports follow it, and the old key
// means nothing any more — two nodes with the same customer label but
// different tenants never ping each other.
func TestTenancyFollowsTheConfiguredLabel(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) { c.Tenant = "tenant" })
	labels := map[string]map[string]string{
		"a-1": {"tenant": "acme", "customer": "shared"},
		"a-2": {"tenant": "acme", "customer": "other"},
		"g-1": {"tenant": "globex", "customer": "shared"},
		"g-2": {"tenant": "globex"},
	}
	agents := map[string]*tenantAgent{}
	for i, name := range []string{"a-1", "a-2", "g-1", "g-2"} {
		agents[name] = &tenantAgent{t: t, addr: col.grpcAddr, name: name, ping: fmt.Sprintf("198.18.1.%d", i+1)}
		if err := agents[name].connectWith("", labels[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for name, want := range map[string][]string{"a-1": {"a-2"}, "a-2": {"a-1"}, "g-1": {"g-2"}, "g-2": {"g-1"}} {
		a := agents[name]
		if err := a.connectWith("", labels[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := a.pingTargets(); !slices.Equal(got, want) {
			t.Errorf("%s pings %v; want %v (the mesh splits by the tenant label, not customer)", name, got, want)
		}
		a.resets(2, 3000)
	}
	// A customer token must select on the configured key.
	if code, body := col.call(t, http.MethodPost, "/api/v1/tokens", `{"name":"old-style","role":"customer","selector":{"customer":"shared"}}`); code != http.StatusBadRequest ||
		!strings.Contains(string(body), `tenant label \"tenant\"`) {
		t.Errorf("a customer token on the old key: HTTP %d %s; want 400 naming the tenant label", code, body)
	}
	if code, body := col.call(t, http.MethodPost, "/api/v1/node-bootstrap-tokens", `{"name":"old-style","labels":{"customer":"acme"}}`); code != http.StatusBadRequest {
		t.Errorf("a bootstrap token on the old key: HTTP %d %s; want 400", code, body)
	}
	acme := customerTokenOn(t, col, "tenant", "acme")
	v := look(t, col, acme, "a-1")
	if want := []string{"a-1", "a-2"}; !slices.Equal(v.fleet, want) || !slices.Equal(v.report, want) || v.count != 4 {
		t.Errorf("acme's fleet %v and report %v (%d resets); want %v with 4", v.fleet, v.report, v.count, want)
	}
	if v := look(t, col, acme, "g-1"); v.code != http.StatusNotFound {
		t.Errorf("acme reading globex's g-1 (same customer label): HTTP %d, want 404", v.code)
	}
}
