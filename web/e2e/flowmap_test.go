package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// flowNode is a simulated agent of the flow map's test: its Hello and the
// one report it sends, with its edges and the addresses its owners held.
type flowNode struct {
	name    string
	labels  map[string]string
	flows   []*nbsv1.FlowEdge
	holders []*nbsv1.AddressHolder
}

// The other tenant's names: none may reach the acme customer's page, API
// answer or CSV.
var globexNames = []string{"bank/ledger-0", "pod:bank.ledger-0", "bank-a"}

// flowScenario: two pods of acme on two nodes (cart-1 → db-0 on 5432 with
// 400 NO_SOCKET resets (over 10 per 5 min across the hour), CRIT; on 6379 with 2 drops, WARN), cart-1 to an
// internet address, and cart-1 to a pod of globex on a globex node, which
// acme must see only as an address.
func flowScenario() []flowNode {
	cart := &nbsv1.FlowOwner{Id: "pod:shop.cart-1", Kind: "pod", Name: "shop/cart-1", Workload: "shop/cart"}
	db := &nbsv1.FlowOwner{Id: "pod:shop.db-0", Kind: "pod", Name: "shop/db-0", Workload: "shop/db"}
	ledger := &nbsv1.FlowOwner{Id: "pod:bank.ledger-0", Kind: "pod", Name: "bank/ledger-0", Workload: "bank/ledger"}
	client := func(o *nbsv1.FlowOwner, peer string, port uint32, e *nbsv1.FlowEdge) *nbsv1.FlowEdge {
		e.Local, e.Role, e.LocalAddress, e.PeerAddress, e.PeerPort = o, nbsv1.FlowRole_FLOW_ROLE_CLIENT, "10.60.0.11", peer, port
		return e
	}
	server := func(o *nbsv1.FlowOwner, local string, port uint32, peer string, e *nbsv1.FlowEdge) *nbsv1.FlowEdge {
		e.Local, e.Role, e.LocalAddress, e.LocalPort, e.PeerAddress = o, nbsv1.FlowRole_FLOW_ROLE_SERVER, local, port, peer
		return e
	}
	return []flowNode{
		{name: "shop-a", labels: map[string]string{"customer": "acme"},
			flows: []*nbsv1.FlowEdge{
				client(cart, "10.60.0.21", 5432, &nbsv1.FlowEdge{Opened: 30, Closed: 30, ResetsReceived: map[string]uint64{"no_socket": 400}, BytesSent: 3000, BytesReceived: 9000}),
				client(cart, "10.60.0.21", 6379, &nbsv1.FlowEdge{Opened: 20, Closed: 20, Drops: map[string]uint64{"netfilter": 2}, BytesSent: 2000, BytesReceived: 2000}),
				client(cart, "203.0.113.9", 443, &nbsv1.FlowEdge{Opened: 50, Closed: 50, BytesSent: 5000, BytesReceived: 500000}),
				client(cart, "10.70.0.31", 8080, &nbsv1.FlowEdge{Opened: 5, Closed: 5, BytesSent: 500, BytesReceived: 500}),
			},
			holders: []*nbsv1.AddressHolder{{Address: "10.60.0.11", Owner: cart}}},
		{name: "shop-b", labels: map[string]string{"customer": "acme"},
			flows: []*nbsv1.FlowEdge{
				server(db, "10.60.0.21", 5432, "10.60.0.11", &nbsv1.FlowEdge{Opened: 30, Closed: 30, ResetsSent: map[string]uint64{"no_socket": 400}, BytesSent: 9000, BytesReceived: 3000}),
				server(db, "10.60.0.21", 6379, "10.60.0.11", &nbsv1.FlowEdge{Opened: 20, Closed: 20, BytesSent: 2000, BytesReceived: 2000}),
			},
			holders: []*nbsv1.AddressHolder{{Address: "10.60.0.21", Owner: db}}},
		{name: "bank-a", labels: map[string]string{"customer": "globex"},
			flows: []*nbsv1.FlowEdge{
				server(ledger, "10.70.0.31", 8080, "10.60.0.11", &nbsv1.FlowEdge{Opened: 5, Closed: 5, BytesSent: 500, BytesReceived: 500}),
			},
			holders: []*nbsv1.AddressHolder{{Address: "10.70.0.31", Owner: ledger}}},
	}
}

// sendFlows connects as the agent n would, sends its Hello and one report
// of its edges, and waits for the collector's ack.
func sendFlows(t testing.TB, grpcAddr string, n flowNode, instance uint64) {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial the collector for %s: %v", n.name, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := nbsv1.NewAgentServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatalf("connect %s: %v", n.name, err)
	}
	const interval = 10 * time.Second
	// The reset tree the map links into, as the agent announces it: a
	// tree link opens a metric the node has.
	var defs []*nbsv1.MetricDefinition
	var samples []*nbsv1.Sample
	for _, id := range []string{"tcp_reset", "tcp_reset/sent", "tcp_reset/sent/no_socket", "tcp_reset/received", "tcp_reset/received/no_socket"} {
		defs = append(defs, &nbsv1.MetricDefinition{Id: id, Title: id, Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE, Scale: 1})
		samples = append(samples, &nbsv1.Sample{MetricId: id, State: nbsv1.State_STATE_OK})
	}
	hello := &nbsv1.Hello{NodeName: n.name, Labels: n.labels, AgentVersion: "flowmap-e2e", KernelRelease: "6.18", InstanceId: instance,
		IntervalMs: uint32(interval.Milliseconds()), Metrics: defs}
	if err := stream.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatalf("hello %s: %v", n.name, err)
	}
	r := &nbsv1.Report{Sequence: 1, TimeUnixNano: time.Now().UnixNano(), IntervalMs: uint32(interval.Milliseconds()), Samples: samples, Flows: n.flows, AddressHolders: n.holders}
	if err := stream.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: r}}); err != nil {
		t.Fatalf("report %s: %v", n.name, err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: waiting for the ack of its report: %v", n.name, err)
		}
		if rej := resp.GetReject(); rej != nil {
			t.Fatalf("%s: the collector rejected its report: %s", n.name, rej.GetReason())
		}
		if ack := resp.GetAck(); ack != nil && ack.GetSequence() == 1 {
			return
		}
	}
}

// flowMapAnswer is GET /flows' answer, as far as this test reads it.
type flowMapAnswer struct {
	Edges []struct {
		Client struct {
			Label string `json:"label"`
		} `json:"client"`
		Server struct {
			Label string `json:"label"`
			Port  int    `json:"port"`
		} `json:"server"`
		State   string `json:"state"`
		Explain string `json:"explain"`
	} `json:"edges"`
}

// TestFlowMapBrowser: the flow map page in Chromium at 1400 and 390 px,
// axe clean, for staff and for a customer, on edges three simulated agents
// sent through the collector's gRPC ingest (the real collector, a real
// PostgreSQL): flowmap.mjs checks the page; here the API's answer is
// checked first, so a failure says which side it is on.
func TestFlowMapBrowser(t *testing.T) {
	t.Parallel()
	webDir, nodeBin, artifacts := browserSetup(t)

	dbURL := pgcluster.Database(t)
	httpAddr, grpcAddr, adminToken := startCollector(t, dbURL, alert.DefaultConfig())
	nbs := site{base: "http://" + httpAddr, token: adminToken}
	if body := nbs.get(t, "/"); !strings.Contains(body, `id="app"`) {
		skipOrFail(t, "the collector in this test binary embeds no UI (web/dist was built after compiling?): %.200s", body)
	}
	if code, body := nbs.do(t, http.MethodGet, "/api/v1/flows", ""); code == http.StatusNotFound && strings.Contains(body, "route") {
		skipOrFail(t, "this collector has no GET /api/v1/flows (the collector's flow map, issue 29, is not in this build): %.200s", body)
	}
	for i, n := range flowScenario() {
		sendFlows(t, grpcAddr, n, uint64(1000+i))
	}
	customerToken := nbs.createToken(t, `{"name":"flowmap-acme","role":"customer","selector":{"customer":"acme"}}`)
	acme := site{base: nbs.base, token: customerToken}

	// The API first: staff see the CRIT edge, joined from both ends.
	crit := func(s site) (string, string) {
		code, body := s.do(t, http.MethodGet, "/api/v1/flows?"+url.Values{"window": {"1h"}, "limit": {"100"}}.Encode(), "")
		if code != http.StatusOK {
			return fmt.Sprintf("GET /api/v1/flows: HTTP %d %.300s", code, body), body
		}
		var m flowMapAnswer
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return fmt.Sprintf("GET /api/v1/flows: %v", err), body
		}
		var seen []string
		for _, e := range m.Edges {
			if e.Client.Label == "shop/cart-1" && e.Server.Label == "shop/db-0" && e.Server.Port == 5432 && e.State == "crit" {
				return "", body
			}
			seen = append(seen, fmt.Sprintf("%s → %s:%d %s (%s)", e.Client.Label, e.Server.Label, e.Server.Port, e.State, e.Explain))
		}
		return fmt.Sprintf("no CRIT edge shop/cart-1 → shop/db-0:5432 yet; edges: %s", strings.Join(seen, "; ")), body
	}
	eventually(t, 60*time.Second, func() string { msg, _ := crit(nbs); return msg })
	var acmeBody string
	eventually(t, 30*time.Second, func() string { msg, body := crit(acme); acmeBody = body; return msg })
	for _, h := range globexNames {
		if strings.Contains(acmeBody, h) {
			t.Errorf("acme's GET /api/v1/flows holds %q: %.500s", h, acmeBody)
		}
	}

	cmd := exec.Command(nodeBin, filepath.Join(webDir, "e2e", "flowmap.mjs"))
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(),
		"NBS_URL="+nbs.base,
		"NBS_TOKEN="+adminToken,
		"NBS_CUSTOMER_TOKEN="+customerToken,
		"NBS_FLOW_CLIENT=shop/cart-1",
		"NBS_FLOW_SERVER=shop/db-0:5432",
		"NBS_FLOW_EXPLAIN=reset",
		"NBS_FLOW_OUTSIDE=203.0.113.9:443",
		"NBS_FLOW_HIDDEN="+strings.Join(globexNames, ","),
		"NBS_ARTIFACTS="+artifacts,
		"NBS_CHROMIUM="+chromium,
	)
	out := &lineLogger{t: t}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		t.Fatalf("flow map browser run failed: %v (screenshots in %s)", err, artifacts)
	}
	t.Logf("screenshots in %s", artifacts)
	if os.Getenv("NBS_UPDATE_SCREENSHOTS") == "1" {
		dst := filepath.Join(webDir, "..", "docs", "screenshots", "flow-map.png")
		if err := copyFile(filepath.Join(artifacts, "flowmap-edge.png"), dst); err != nil {
			t.Fatalf("update %s: %v", dst, err)
		}
		t.Logf("updated %s", dst)
	}
}
