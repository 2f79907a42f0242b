package e2e

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// flowReport is a report of one interval's flow edges and address holders,
// as an agent sends it (Report.flows, Report.address_holders).
func (a *tenantAgent) flowReport(edges []*nbsv1.FlowEdge, holders []*nbsv1.AddressHolder) *nbsv1.ConnectRequest {
	a.seq++
	r := report(a.seq, sample("tcp_reset", 0))
	r.GetReport().Flows, r.GetReport().AddressHolders = edges, holders
	return r
}

func flowPod(ns, name, workload string) *nbsv1.FlowOwner {
	return &nbsv1.FlowOwner{Id: "pod:" + ns + "." + name, Kind: "pod", Name: ns + "/" + name, Workload: ns + "/" + workload}
}

// The flow map end to end, with agents simulated at the wire (the agent's
// own measurements are flowagent's lab tests): agents of two tenants whose
// address spaces overlap report both ends of connections over gRPC, through
// enrollment, validation and storage, to the API. The client and server
// ends are one edge, its resets make it crit and say so; a bad edge is
// rejected with its reason and the stream goes on; each customer's map,
// JSON and CSV, has its own edges only, and another tenant's owner at the
// same address is just an address.
func TestFlowMapEndToEnd(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", enrollWith(tokenFile(t)),
		func(c *collectorapp.Config) { c.NodeAuth.Mode = "enroll" })
	acmeToken, globexToken := readToken(t, tenantTokenFile(t, col, "acme")), readToken(t, tenantTokenFile(t, col, "globex"))
	agents := map[string]*tenantAgent{}
	for i, n := range []struct{ name, token string }{{"acme-1", acmeToken}, {"acme-2", acmeToken}, {"globex-1", globexToken}} {
		a := &tenantAgent{t: t, addr: col.grpcAddr, name: n.name, ping: fmt.Sprintf("198.18.2.%d", i+1)}
		if err := a.connect(n.token, ""); err != nil {
			t.Fatalf("%s enrolling: %v", n.name, err)
		}
		agents[n.name] = a
	}
	cart, db, ledger := flowPod("shop", "cart-1", "cart"), flowPod("shop", "db-0", "db"), flowPod("bank", "ledger-0", "ledger")

	// A bad edge: the report is rejected naming it, and nothing is lost.
	a1 := agents["acme-1"]
	bad := a1.flowReport([]*nbsv1.FlowEdge{{Local: cart, Role: nbsv1.FlowRole_FLOW_ROLE_CLIENT, LocalAddress: "10.0.0.1", PeerAddress: "10.0.0.2", PeerPort: 70000}}, nil)
	if err := a1.stream.Send(bad); err != nil {
		t.Fatal(err)
	}
	rej, err := recvSkippingConfigs(a1.stream)
	if err != nil || rej.GetReject() == nil || !strings.Contains(rej.GetReject().GetReason(), "flow edge 0: peer_port 70000 is above 65535") {
		t.Fatalf("a bad flow edge: %v %v; want a reject naming it", rej, err)
	}

	a1.sendAcked(a1.flowReport([]*nbsv1.FlowEdge{{Local: cart, Role: nbsv1.FlowRole_FLOW_ROLE_CLIENT, LocalAddress: "10.0.0.1",
		PeerAddress: "10.0.0.2", PeerPort: 5432, Opened: 20, Closed: 20, BytesSent: 4000, BytesReceived: 90000,
		ResetsReceived: map[string]uint64{"no_socket": 12}}},
		[]*nbsv1.AddressHolder{{Address: "10.0.0.1", Owner: cart}}))
	agents["acme-2"].sendAcked(agents["acme-2"].flowReport([]*nbsv1.FlowEdge{{Local: db, Role: nbsv1.FlowRole_FLOW_ROLE_SERVER, LocalAddress: "10.0.0.2",
		LocalPort: 5432, PeerAddress: "10.0.0.1", Opened: 20, Closed: 20, BytesSent: 90000, BytesReceived: 4000,
		ResetsSent: map[string]uint64{"no_socket": 12}}},
		[]*nbsv1.AddressHolder{{Address: "10.0.0.2", Owner: db}}))
	// globex's ledger holds the same address as acme's db, and is reached
	// from the same address as acme's cart.
	agents["globex-1"].sendAcked(agents["globex-1"].flowReport([]*nbsv1.FlowEdge{{Local: ledger, Role: nbsv1.FlowRole_FLOW_ROLE_SERVER,
		LocalAddress: "10.0.0.2", LocalPort: 5432, PeerAddress: "10.0.0.1", Opened: 3, Closed: 3}},
		[]*nbsv1.AddressHolder{{Address: "10.0.0.2", Owner: ledger}}))

	type flowEnd struct {
		Owner   *string `json:"owner"`
		Address string  `json:"address"`
		Label   string  `json:"label"`
		Outside bool    `json:"outside"`
	}
	type flowMap struct {
		Edges []struct {
			Key     string                       `json:"key"`
			Client  flowEnd                      `json:"client"`
			Server  flowEnd                      `json:"server"`
			SeenBy  []string                     `json:"seen_by"`
			Opened  uint64                       `json:"opened"`
			Resets  map[string]map[string]uint64 `json:"resets"`
			State   string                       `json:"state"`
			Explain string                       `json:"explain"`
		} `json:"edges"`
		TotalEdges int `json:"total_edges"`
	}
	get := func(token string, q url.Values) (flowMap, []byte) {
		t.Helper()
		q.Set("window", "5m")
		code, body := as(t, col, token, http.MethodGet, "/api/v1/flows?"+q.Encode(), "")
		if code != http.StatusOK {
			t.Fatalf("GET /flows?%s: HTTP %d %s", q.Encode(), code, body)
		}
		var m flowMap
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		return m, body
	}

	acme, globex := customerToken(t, col, "acme"), customerToken(t, col, "globex")
	m, body := get(acme, url.Values{})
	if len(m.Edges) != 1 {
		t.Fatalf("acme's map: %s", body)
	}
	e := m.Edges[0]
	if e.Client.Label != "shop/cart-1" || e.Server.Label != "shop/db-0" || strings.Join(e.SeenBy, "+") != "client+server" || e.Opened != 20 ||
		e.Resets["server_sent"]["no_socket"] != 12 || e.State != "crit" || !strings.Contains(e.Explain, "12 resets in ") {
		t.Fatalf("acme's edge: %s", body)
	}
	m, gbody := get(globex, url.Values{})
	if len(m.Edges) != 1 || m.Edges[0].Client.Owner != nil || m.Edges[0].Client.Label != "10.0.0.1" || !m.Edges[0].Client.Outside ||
		m.Edges[0].Server.Label != "bank/ledger-0" || m.Edges[0].Opened != 3 {
		t.Fatalf("globex's map: %s", gbody)
	}
	_, acmeCSV := as(t, col, acme, http.MethodGet, "/api/v1/flows?window=5m&format=csv", "")
	_, globexCSV := as(t, col, globex, http.MethodGet, "/api/v1/flows?window=5m&format=csv", "")
	if rows, err := csv.NewReader(strings.NewReader(string(acmeCSV))).ReadAll(); err != nil || len(rows) != 2 {
		t.Fatalf("acme's CSV: %v\n%s", err, acmeCSV)
	}
	for _, c := range []struct {
		who    string
		answer []byte
		never  []string
	}{
		{"acme JSON", body, []string{"globex", "bank", "ledger"}}, {"acme CSV", acmeCSV, []string{"globex", "bank", "ledger"}},
		{"globex JSON", gbody, []string{"acme", "shop", "cart", "db-0"}}, {"globex CSV", globexCSV, []string{"acme", "shop", "cart", "db-0"}},
	} {
		for _, n := range c.never {
			if strings.Contains(string(c.answer), n) {
				t.Errorf("%s names %q:\n%s", c.who, n, c.answer)
			}
		}
	}
	// globex's edge is not acme's to open; acme's opens, with links into
	// both ends' trees.
	if code, _ := as(t, col, acme, http.MethodGet, "/api/v1/flows/edge?window=5m&key="+url.QueryEscape(m.Edges[0].Key), ""); code != http.StatusNotFound {
		t.Errorf("acme opening globex's edge: HTTP %d, want 404", code)
	}
	code, detail := as(t, col, acme, http.MethodGet, "/api/v1/flows/edge?window=5m&key="+url.QueryEscape(e.Key), "")
	if code != http.StatusOK || !strings.Contains(string(detail), `"tcp_reset/sent/no_socket"`) || !strings.Contains(string(detail), `/api/v1/nodes/acme-2/events?`) {
		t.Fatalf("acme's edge detail: HTTP %d %s", code, detail)
	}
	// Staff see both tenants' edges, never joined across them.
	if m, body := get(col.token, url.Values{}); m.TotalEdges != 2 {
		t.Fatalf("staff's map: %s", body)
	}
}

// The flow map from real agents (flowagent's BPF) in a namespace lab: A
// sends a megabyte to a sink in B over one connection and connects five
// times to a port of B where nothing listens. Through two agents, the
// collector and PostgreSQL, the map has the two edges between A's and B's
// owners, each joined from both ends, with the lab's own counts: one
// connection and its bytes, five failed connects refused by B
// (NO_SOCKET), which make the edge crit and say so; and A's active opens
// in the kernel's counters are the map's.
func TestFlowMapFromRealAgents(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	// Edges with every report, so the test does not wait for the minute
	// (--flows.every's default; TestHeldIntervalsAddUp sums the intervals).
	flowsOn := func(c *agentapp.Config) { c.FlowsEnable, c.FlowsEvery = true, 0 }
	startAgent(t, "lab-a", lab.A, col.grpcAddr, flowsOn)
	startAgent(t, "lab-b", lab.B, col.grpcAddr, flowsOn)
	waitNode(t, col, "lab-a")
	waitNode(t, col, "lab-b")

	a0 := lab.Nstat(t, lab.A)
	const size, refused = 1 << 20, 5
	addr, wait := lab.Sink(t, netip.AddrPortFrom(lab.IPB, 0), size)
	var c net.Conn
	if err := lab.Do(lab.A, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	wait()
	lab.ResetNoSocket(t, refused)
	a1 := lab.Nstat(t, lab.A)
	sinkPort, err := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}

	type edge struct {
		Client, Server struct {
			Owner   *string `json:"owner"`
			Address string  `json:"address"`
			Port    *int    `json:"port"`
		}
		SeenBy   []string                     `json:"seen_by"`
		Opened   uint64                       `json:"opened"`
		Failed   uint64                       `json:"failed"`
		Closed   uint64                       `json:"closed"`
		BytesC2S uint64                       `json:"bytes_client_to_server"`
		Resets   map[string]map[string]uint64 `json:"resets"`
		State    string                       `json:"state"`
		Explain  string                       `json:"explain"`
	}
	var bulk, refusedEdge *edge
	eventually(t, 30*time.Second, func() string {
		var m struct {
			Edges []edge `json:"edges"`
		}
		col.getJSON(t, "/api/v1/flows?window=15m", &m)
		bulk, refusedEdge = nil, nil
		for i, e := range m.Edges {
			if e.Client.Address != lab.IPA.String() || e.Server.Address != lab.IPB.String() || e.Client.Owner == nil || e.Server.Owner == nil ||
				!strings.HasPrefix(*e.Client.Owner, "lab-a|") || !strings.HasPrefix(*e.Server.Owner, "lab-b|") {
				continue
			}
			switch *e.Server.Port {
			case sinkPort:
				bulk = &m.Edges[i]
			case int(lab.ClosedPort):
				refusedEdge = &m.Edges[i]
			}
		}
		switch {
		case bulk == nil || refusedEdge == nil:
			return fmt.Sprintf("the map has no edge lab-a → lab-b:%d and :%d yet: %+v", sinkPort, lab.ClosedPort, m.Edges)
		case len(bulk.SeenBy) != 2 || bulk.Closed != 1 || bulk.BytesC2S != size:
			return fmt.Sprintf("bulk edge %+v, want seen by both ends, 1 closed, %d bytes", *bulk, size)
		case len(refusedEdge.SeenBy) != 2 || refusedEdge.Failed != refused:
			return fmt.Sprintf("refused edge %+v, want seen by both ends, %d failed", *refusedEdge, refused)
		}
		return ""
	})
	if bulk.Opened != 1 || bulk.Failed != 0 || bulk.State != "ok" {
		t.Errorf("bulk edge %+v, want 1 opened, none failed, ok", *bulk)
	}
	if refusedEdge.Resets["server_sent"]["no_socket"] != refused || refusedEdge.Resets["client_received"]["syn_sent"] != refused ||
		refusedEdge.State != "crit" || !strings.Contains(refusedEdge.Explain, fmt.Sprintf("%d of %d connects failed", refused, refused)) {
		t.Errorf("refused edge %+v, want %d no_socket resets sent by B and received in syn_sent by A, crit", *refusedEdge, refused)
	}
	if opens := a1["TcpActiveOpens"] - a0["TcpActiveOpens"]; opens != bulk.Opened+refusedEdge.Failed {
		t.Errorf("A's TcpActiveOpens rose by %d; the map has %d opened and %d failed", opens, bulk.Opened, refusedEdge.Failed)
	}
}

// A stopping agent's last report carries what it summed for a later one
// (--flows.every): the refused connects of an interval that no report
// carried yet reach the collector when the agent stops mid-interval.
func TestFlowEdgesOfAStoppingAgentReachTheCollector(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	// Edges on the hour (--flows.every's most): none after the first
	// report, but across an hour's boundary.
	const every = time.Hour
	started := time.Now()
	a := startAgent(t, "stop-a", lab.A, col.grpcAddr, func(c *agentapp.Config) { c.FlowsEnable, c.FlowsEvery = true, every })
	waitNode(t, col, "stop-a")
	const refused = 4
	lab.ResetNoSocket(t, refused)
	find := func() (failed uint64, found bool) {
		var m struct {
			Edges []struct {
				Client, Server struct {
					Address string `json:"address"`
					Port    *int   `json:"port"`
				}
				Failed uint64 `json:"failed"`
			} `json:"edges"`
		}
		col.getJSON(t, "/api/v1/flows?window=15m", &m)
		for _, e := range m.Edges {
			if e.Client.Address == lab.IPA.String() && e.Server.Address == lab.IPB.String() && e.Server.Port != nil &&
				*e.Server.Port == int(lab.ClosedPort) {
				return e.Failed, true
			}
		}
		return 0, false
	}
	// Two reports after the connects, neither with them (unless the hour
	// turned since the start: then one was due).
	after := a.Reports() + 2
	eventually(t, 20*time.Second, func() string {
		if n := a.Reports(); n < after {
			return fmt.Sprintf("%d reports, want %d", n, after)
		}
		return ""
	})
	if _, found := find(); found && started.Truncate(every).Equal(time.Now().Truncate(every)) {
		t.Fatal("the refused connects reached the collector before the agent stopped: nothing was held")
	}
	a.stop()
	eventually(t, 20*time.Second, func() string {
		failed, found := find()
		if !found || failed != refused {
			return fmt.Sprintf("the edge lab-a → %s:%d: found %v, %d failed; want %d", lab.IPB, lab.ClosedPort, found, failed, refused)
		}
		return ""
	})
}
