package flows_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api/apitest"
	"github.com/nbs-project/nbs/collector/flows"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// lab is a store with nodes of two tenants, written through WriteReports
// as ingest writes them.
type lab struct {
	t     *testing.T
	st    *store.Store
	svc   *flows.Service
	nodes map[string]int32
	seq   map[string]uint64
	t0    time.Time
}

func newLab(t *testing.T) *lab {
	t.Helper()
	st := storetest.Open(t)
	l := &lab{t: t, st: st, svc: flows.New(st, slog.New(slog.DiscardHandler)), nodes: map[string]int32{}, seq: map[string]uint64{},
		t0: time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)}
	return l
}

func (l *lab) node(name, tenant string) {
	l.t.Helper()
	labels := map[string]string{"zone": "a"}
	if tenant != "" {
		labels["customer"] = tenant
	}
	id, err := l.st.UpsertNode(context.Background(), store.Node{Name: name, Labels: labels, Tenant: tenant, InstanceID: 1, IntervalMS: 60000})
	if err != nil {
		l.t.Fatal(err)
	}
	l.nodes[name] = id
}

// report writes one report of node at minute min after t0 (interval a
// minute), returning whether it was new.
func (l *lab) report(node string, min int, edges []store.FlowEdge, holders []store.AddressHolder) bool {
	l.t.Helper()
	l.seq[node]++
	return l.reportSeq(node, l.seq[node], min, edges, holders)
}

func (l *lab) reportSeq(node string, seq uint64, min int, edges []store.FlowEdge, holders []store.AddressHolder) bool {
	l.t.Helper()
	r := store.Report{NodeID: l.nodes[node], InstanceID: 1, Seq: seq, Time: l.t0.Add(time.Duration(min)*time.Minute + 30*time.Second),
		IntervalMS: 60000, Flows: edges, Holders: holders}
	got, err := l.st.WriteReports(context.Background(), []store.Report{r})
	if err != nil {
		l.t.Fatal(err)
	}
	return got[r.Key()]
}

var (
	staff = access.Principal{Name: "op", Role: access.RoleViewer}
	acme  = access.Principal{Name: "acme", Role: access.RoleCustomer, Selector: access.Selector{"customer": "acme"}}
)

// get calls the service as p and returns the status and body.
func (l *lab) get(p access.Principal, path string, q url.Values) (int, []byte) {
	l.t.Helper()
	if q.Get("from") == "" && q.Get("window") == "" {
		q.Set("from", l.t0.Format(time.RFC3339))
		q.Set("to", l.t0.Add(time.Hour).Format(time.RFC3339))
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1"+path+"?"+q.Encode(), nil)
	req = req.WithContext(access.WithPrincipal(req.Context(), p))
	w := httptest.NewRecorder()
	switch path {
	case "/flows":
		l.svc.ListFlows(w, req)
	case "/flows/edge":
		l.svc.GetFlowEdge(w, req)
	default:
		l.t.Fatalf("no route %s", path)
	}
	return w.Code, w.Body.Bytes()
}

type apiMap struct {
	Owners []struct {
		Key, Node, ID, Kind, Name, Workload, Namespace string
	}
	Edges []struct {
		Key    string
		Client struct {
			Owner   *string
			Address string
			Label   string
			Outside bool
		}
		Server struct {
			Owner   *string
			Address string
			Port    *int
			Label   string
			Outside bool
		}
		SeenBy      []string `json:"seen_by"`
		Opened      uint64
		Failed      uint64
		Retransmits uint64
		Resets      map[string]map[string]uint64
		Drops       map[string]map[string]uint64
		BytesC2S    uint64   `json:"bytes_client_to_server"`
		RTTP99      *float64 `json:"rtt_p99_ms"`
		State       string
		Explain     string
	}
	Other struct {
		EdgesFolded    uint64 `json:"edges_folded"`
		Opened         uint64
		NodesCapped    int    `json:"nodes_capped"`
		HoldersLeftOut uint64 `json:"holders_left_out"`
	}
	TotalEdges int     `json:"total_edges"`
	NextCursor *string `json:"next_cursor"`
}

// flowMap gets /flows as p, checks the answer against openapi.json, and
// decodes it.
func (l *lab) flowMap(p access.Principal, q url.Values) (apiMap, []byte) {
	l.t.Helper()
	code, body := l.get(p, "/flows", q)
	if code != http.StatusOK {
		l.t.Fatalf("GET /flows?%s: %d %s", q.Encode(), code, body)
	}
	doc, err := apitest.Load()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := doc.CheckResponse("GET", "/flows", code, body); err != nil {
		l.t.Fatalf("GET /flows answer does not match openapi.json: %v\n%s", err, body)
	}
	var m apiMap
	if err := json.Unmarshal(body, &m); err != nil {
		l.t.Fatal(err)
	}
	return m, body
}

// edges renders a map's edges as "client -> server" lines with their
// opened count, sorted, for comparing with what a test expects.
func edges(m apiMap) []string {
	var out []string
	for _, e := range m.Edges {
		out = append(out, fmt.Sprintf("%s -> %s opened=%d seen=%s", e.Client.Label, e.Server.Label, e.Opened, strings.Join(e.SeenBy, "+")))
	}
	slices.Sort(out)
	return out
}

func pod(ns, name, workload string) store.FlowOwner {
	return store.FlowOwner{ID: "pod:" + ns + "." + name, Kind: "pod", Name: ns + "/" + name, Workload: ns + "/" + workload}
}

func clientEdge(o store.FlowOwner, local, peer string, port uint16, opened uint64) store.FlowEdge {
	return store.FlowEdge{Local: o, Role: store.FlowClient, LocalAddr: local, PeerAddr: peer, PeerPort: port,
		FlowCounters: store.FlowCounters{Opened: opened, Closed: opened, BytesSent: 1000 * opened, BytesRecv: 2000 * opened}}
}

func serverEdge(o store.FlowOwner, local string, port uint16, peer string, opened uint64) store.FlowEdge {
	return store.FlowEdge{Local: o, Role: store.FlowServer, LocalAddr: local, LocalPort: port, PeerAddr: peer,
		FlowCounters: store.FlowCounters{Opened: opened, Closed: opened, BytesSent: 2000 * opened, BytesRecv: 1000 * opened}}
}

func holds(addr string, o store.FlowOwner) store.AddressHolder {
	return store.AddressHolder{Address: addr, Owner: o}
}

func same(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// A pod address reused: db-0 (workload shop/db) holds 10.0.0.2 until minute
// 4, then cache-0 (shop/cache, on another node) from minute 6. The client's
// connections to 10.0.0.2 before go to db-0, after to cache-0, and none of
// the later ones to db-0 (no phantom edge), whatever the window's
// resolution.
func TestResolutionByTime(t *testing.T) {
	l := newLab(t)
	l.node("n1", "acme")
	l.node("n2", "acme")
	l.node("n3", "acme")
	cart, db, cache := pod("shop", "cart-1", "cart"), pod("shop", "db-0", "db"), pod("shop", "cache-0", "cache")
	for m := 0; m < 12; m++ {
		var e []store.FlowEdge
		switch {
		case m >= 1 && m <= 4:
			e = append(e, clientEdge(cart, "10.0.0.1", "10.0.0.2", 5432, 2))
		case m >= 7:
			e = append(e, clientEdge(cart, "10.0.0.1", "10.0.0.2", 5432, 3))
		}
		l.report("n1", m, e, []store.AddressHolder{holds("10.0.0.1", cart)})
		if m <= 4 {
			l.report("n2", m, nil, []store.AddressHolder{holds("10.0.0.2", db)})
		}
		if m >= 6 {
			l.report("n3", m, nil, []store.AddressHolder{holds("10.0.0.2", cache)})
		}
	}
	want := []string{"shop/cart-1 -> shop/cache-0 opened=15 seen=client", "shop/cart-1 -> shop/db-0 opened=8 seen=client"}
	m, _ := l.flowMap(staff, url.Values{})
	same(t, "edges over the hour", edges(m), want)
	// Over two days the map is read from the hour buckets, which hold both
	// holders' minutes; it is read per minute for that address.
	m, _ = l.flowMap(staff, url.Values{"from": {l.t0.Add(-24 * time.Hour).Format(time.RFC3339)}, "to": {l.t0.Add(24 * time.Hour).Format(time.RFC3339)}})
	if len(m.Edges) != 2 {
		t.Fatalf("over two days: %q", edges(m))
	}
	// Before the reuse only db-0; after it only cache-0.
	m, _ = l.flowMap(staff, url.Values{"from": {l.t0.Format(time.RFC3339)}, "to": {l.t0.Add(5 * time.Minute).Format(time.RFC3339)}})
	same(t, "edges before the reuse", edges(m), []string{"shop/cart-1 -> shop/db-0 opened=8 seen=client"})
	m, _ = l.flowMap(staff, url.Values{"from": {l.t0.Add(6 * time.Minute).Format(time.RFC3339)}, "to": {l.t0.Add(15 * time.Minute).Format(time.RFC3339)}})
	same(t, "edges after the reuse", edges(m), []string{"shop/cart-1 -> shop/cache-0 opened=15 seen=client"})
}

// Both ends of the same connections are one edge; a resent report adds
// nothing; the detail has the edge's series and links into both trees.
func TestClientAndServerJoined(t *testing.T) {
	l := newLab(t)
	l.node("n1", "acme")
	l.node("n2", "acme")
	cart, db := pod("shop", "cart-1", "cart"), pod("shop", "db-0", "db")
	c := clientEdge(cart, "10.0.0.1", "10.0.0.2", 5432, 4)
	c.ResetsRecv = map[string]uint64{"no_socket": 3}
	c.RTT = map[int32]uint64{300: 10}
	s := serverEdge(db, "10.0.0.2", 5432, "10.0.0.1", 4)
	s.ResetsSent = map[string]uint64{"no_socket": 3}
	s.Retransmits = 2
	for m := range 3 {
		l.report("n1", m, []store.FlowEdge{c}, []store.AddressHolder{holds("10.0.0.1", cart)})
		l.report("n2", m, []store.FlowEdge{s}, []store.AddressHolder{holds("10.0.0.2", db)})
	}
	// The last report of n2 again, as after a reconnect.
	if l.reportSeq("n2", l.seq["n2"], 2, []store.FlowEdge{s}, []store.AddressHolder{holds("10.0.0.2", db)}) {
		t.Fatal("a resent report was stored again")
	}
	m, _ := l.flowMap(staff, url.Values{})
	same(t, "edges", edges(m), []string{"shop/cart-1 -> shop/db-0 opened=12 seen=client+server"})
	e := m.Edges[0]
	if e.Resets["server_sent"]["no_socket"] != 9 || e.Resets["client_received"]["no_socket"] != 9 || e.Retransmits != 6 || e.BytesC2S != 12000 {
		t.Fatalf("edge figures %+v", e)
	}
	if e.State != "warn" || !strings.Contains(e.Explain, "9 resets in 1h") || !strings.Contains(e.Explain, "no_socket: 9") {
		t.Fatalf("state %s %q, want warn explaining 9 resets", e.State, e.Explain)
	}
	if e.RTTP99 == nil || *e.RTTP99 <= 0 {
		t.Fatalf("rtt p99 %v, want the client's samples", e.RTTP99)
	}
	if *e.Server.Port != 5432 || e.Client.Address != "10.0.0.1" || e.Server.Address != "10.0.0.2" {
		t.Fatalf("ends %+v %+v", e.Client, e.Server)
	}
	code, body := l.get(staff, "/flows/edge", url.Values{"key": {e.Key}})
	if code != http.StatusOK {
		t.Fatalf("GET /flows/edge: %d %s", code, body)
	}
	doc, _ := apitest.Load()
	if err := doc.CheckResponse("GET", "/flows/edge", code, body); err != nil {
		t.Fatalf("detail does not match openapi.json: %v", err)
	}
	var d struct {
		Series []struct{ Opened, Resets uint64 }
		Links  struct {
			Tree []struct {
				End, Node, Path string
				Metrics         []string
			}
			Evidence []struct{ End, Node, Path string }
		}
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Series) != 3 || d.Series[0].Opened != 4 || d.Series[2].Opened != 4 || d.Series[1].Resets != 6 {
		t.Fatalf("series %+v, want 3 minutes of 4 opened and 3+3 resets", d.Series)
	}
	if len(d.Links.Tree) != 2 || d.Links.Tree[0].Node != "n1" || d.Links.Tree[1].Node != "n2" ||
		!slices.Contains(d.Links.Tree[1].Metrics, "tcp_reset/sent/no_socket") || !slices.Contains(d.Links.Tree[0].Metrics, "tcp_reset/received/no_socket") {
		t.Fatalf("tree links %+v", d.Links.Tree)
	}
	if len(d.Links.Evidence) != 2 || !strings.HasPrefix(d.Links.Evidence[1].Path, "/api/v1/nodes/n2/events?") || !strings.Contains(d.Links.Evidence[1].Path, "metric=tcp_reset") {
		t.Fatalf("evidence links %+v", d.Links.Evidence)
	}
	for _, c := range []struct {
		key  string
		code int
	}{{"", 400}, {"%%%", 400}, {"WyJhOjEuMi4zLjQiLCJhOjUuNi43LjgiLDgwLCJhY21lIl0", 404}} {
		if code, body := l.get(staff, "/flows/edge", url.Values{"key": {c.key}}); code != c.code || !strings.Contains(string(body), "key") {
			t.Errorf("key %q: %d %s, want %d naming key", c.key, code, body, c.code)
		}
	}
}

// Loopback connections never leave their namespace: both ends are the
// local owner, joined into one edge, though every node and namespace holds
// 127.0.0.1 and no agent lists it as held.
func TestLoopbackIsTheOwnerItself(t *testing.T) {
	l := newLab(t)
	l.node("n1", "acme")
	l.node("n2", "acme")
	app, other := pod("shop", "app-1", "app"), pod("shop", "other-1", "other")
	c := clientEdge(app, "127.0.0.1", "127.0.0.1", 6379, 3)
	s := serverEdge(app, "127.0.0.1", 6379, "127.0.0.1", 3)
	l.report("n1", 1, []store.FlowEdge{c, s}, []store.AddressHolder{holds("10.0.0.1", app)})
	// Another node's owner on the same loopback address and port.
	l.report("n2", 1, []store.FlowEdge{clientEdge(other, "::1", "::1", 6379, 2)}, []store.AddressHolder{holds("10.0.0.2", other)})
	m, _ := l.flowMap(staff, url.Values{})
	same(t, "edges", edges(m), []string{
		"shop/app-1 -> shop/app-1 opened=3 seen=client+server",
		"shop/other-1 -> shop/other-1 opened=2 seen=client",
	})
	for _, e := range m.Edges {
		if e.Client.Outside || e.Server.Outside {
			t.Errorf("a loopback end reads outside: %+v %+v", e.Client, e.Server)
		}
	}
}

// Two services behind one address and port (a Service's ClusterIP): the
// client's node translated each connection to its backend, so there are
// two edges; an untranslated one stays the address, outside.
func TestTranslatedPeersSplit(t *testing.T) {
	l := newLab(t)
	l.node("n1", "acme")
	l.node("n2", "acme")
	web, a, b := pod("shop", "web-1", "web"), pod("shop", "api-a-0", "api-a"), pod("shop", "api-b-0", "api-b")
	viaA := clientEdge(web, "10.0.0.1", "10.96.0.10", 80, 5)
	viaA.XlatAddr, viaA.XlatPort = "10.0.0.2", 8080
	viaB := clientEdge(web, "10.0.0.1", "10.96.0.10", 80, 7)
	viaB.XlatAddr, viaB.XlatPort = "10.0.0.3", 8080
	direct := clientEdge(web, "10.0.0.1", "10.96.0.10", 80, 1)
	l.report("n1", 1, []store.FlowEdge{viaA, viaB, direct}, []store.AddressHolder{holds("10.0.0.1", web)})
	l.report("n2", 1, nil, []store.AddressHolder{holds("10.0.0.2", a), holds("10.0.0.3", b)})
	m, _ := l.flowMap(staff, url.Values{})
	same(t, "edges", edges(m), []string{
		"shop/web-1 -> 10.96.0.10:80 opened=1 seen=client",
		"shop/web-1 -> shop/api-a-0 opened=5 seen=client",
		"shop/web-1 -> shop/api-b-0 opened=7 seen=client",
	})
	for _, e := range m.Edges {
		if e.Server.Owner == nil && (!e.Server.Outside || e.Server.Address != "10.96.0.10") {
			t.Errorf("the untranslated peer %+v is not an outside address", e.Server)
		}
	}
}

// A customer's map holds nothing of another tenant: not its owners' names,
// nodes or addresses, not its edges; an address another tenant's owner
// held looks exactly like an address of the internet. Nor the operator's
// processes: a process owner is its address only.
func TestTenancy(t *testing.T) {
	l := newLab(t)
	l.node("acme-1", "acme")
	l.node("globex-1", "globex")
	cart := pod("shop", "cart-1", "cart")
	secret := pod("vault", "secret-0", "secret")
	proc := store.FlowOwner{ID: "process:4242", Kind: "process", Name: "sshd-helper (4242)"}
	l.report("acme-1", 1, []store.FlowEdge{
		clientEdge(cart, "10.0.0.1", "10.0.0.9", 443, 2),    // an address globex's secret-0 holds
		clientEdge(cart, "10.0.0.1", "203.0.113.5", 443, 2), // the internet
		clientEdge(proc, "10.0.0.1", "203.0.113.6", 22, 1),  // the operator's process
	}, []store.AddressHolder{holds("10.0.0.1", cart)})
	l.report("globex-1", 1, []store.FlowEdge{
		clientEdge(secret, "10.0.0.9", "10.0.0.77", 8200, 3),
		serverEdge(secret, "10.0.0.9", 443, "10.0.0.1", 2),
	}, []store.AddressHolder{holds("10.0.0.9", secret)})

	m, body := l.flowMap(acme, url.Values{})
	same(t, "acme's edges", edges(m), []string{
		"10.0.0.1 -> 203.0.113.6:22 opened=1 seen=client",
		"shop/cart-1 -> 10.0.0.9:443 opened=2 seen=client",
		"shop/cart-1 -> 203.0.113.5:443 opened=2 seen=client",
	})
	var foreign, internet map[string]any
	var raw struct{ Edges []map[string]any }
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, e := range raw.Edges {
		srv := e["server"].(map[string]any)
		switch srv["address"] {
		case "10.0.0.9":
			foreign = srv
		case "203.0.113.5":
			internet = srv
		}
	}
	if foreign == nil || internet == nil || foreign["outside"] != true || foreign["owner"] != nil || len(foreign) != len(internet) {
		t.Fatalf("another tenant's address %v does not look like the internet's %v", foreign, internet)
	}
	csvCode, csvBody := l.get(acme, "/flows", url.Values{"format": {"csv"}})
	if csvCode != 200 {
		t.Fatalf("CSV: %d %s", csvCode, csvBody)
	}
	rows, err := csv.NewReader(strings.NewReader(string(csvBody))).ReadAll()
	if err != nil || len(rows) != 4 || !slices.Equal(rows[0], flows.CSVHeader) {
		t.Fatalf("CSV %d rows, %v:\n%s", len(rows), err, csvBody)
	}
	for _, answer := range []struct {
		what string
		body []byte
	}{{"JSON", body}, {"CSV", csvBody}} {
		for _, never := range []string{"globex", "vault", "secret", "10.0.0.77", "8200", "process:", "sshd", "4242"} {
			if strings.Contains(string(answer.body), never) {
				t.Errorf("acme's %s answer names %q:\n%s", answer.what, never, answer.body)
			}
		}
	}
	// Staff see both tenants, the join across none of them (the globex
	// server edge's client 10.0.0.1 is no globex owner's), and can narrow
	// to one tenant; a customer may not name one.
	m, _ = l.flowMap(staff, url.Values{"tenant": {"globex"}})
	same(t, "globex's edges", edges(m), []string{
		"10.0.0.1 -> vault/secret-0 opened=2 seen=server",
		"vault/secret-0 -> 10.0.0.77:8200 opened=3 seen=client",
	})
	m, _ = l.flowMap(staff, url.Values{})
	if len(m.Edges) != 5 {
		t.Fatalf("staff see %q, want all 5 edges", edges(m))
	}
	if code, body := l.get(acme, "/flows", url.Values{"tenant": {"globex"}}); code != 400 || !strings.Contains(string(body), "tenant") {
		t.Fatalf("a customer naming a tenant: %d %s, want 400 naming tenant", code, body)
	}
	// Graphs are kept a few seconds by who asked: acme asking again after
	// staff still gets its own.
	if _, again := l.flowMap(acme, url.Values{}); string(again) != string(body) {
		t.Fatalf("acme's map after staff's:\n%s\nwant\n%s", again, body)
	}
	// Nor does another customer get acme's.
	globexP := access.Principal{Name: "globex", Role: access.RoleCustomer, Selector: access.Selector{"customer": "globex"}}
	if g, gb := l.flowMap(globexP, url.Values{}); len(g.Edges) != 2 || strings.Contains(string(gb), "cart") {
		t.Fatalf("globex's map after acme's: %s", gb)
	}
	// Nor by the vertex of another tenant's owner (vertex=): acme's edge to
	// the address secret-0 holds is found by the address, never the owner.
	for _, c := range []struct {
		vertex string
		want   []string
	}{
		{"globex-1|pod:vault.secret-0", nil},
		{"10.0.0.9", []string{"shop/cart-1 -> 10.0.0.9:443 opened=2 seen=client"}},
	} {
		m, vb := l.flowMap(acme, url.Values{"vertex": {c.vertex}})
		same(t, "acme's vertex="+c.vertex, edges(m), c.want)
		if strings.Contains(string(vb), "secret") || strings.Contains(string(vb), "globex") {
			t.Errorf("acme's vertex=%s answer names globex's owner:\n%s", c.vertex, vb)
		}
	}
	// Nor is an edge of another tenant found by its key.
	m, _ = l.flowMap(staff, url.Values{"tenant": {"globex"}})
	if code, _ := l.get(acme, "/flows/edge", url.Values{"key": {m.Edges[0].Key}}); code != 404 {
		t.Fatalf("acme asking for globex's edge: %d, want 404", code)
	}
}

// Paging with next_cursor walks every edge exactly once, in either sort,
// and the filters narrow the total.
func TestPaging(t *testing.T) {
	l := newLab(t)
	l.node("n1", "acme")
	l.node("n2", "acme")
	var es []store.FlowEdge
	var hs []store.AddressHolder
	for i := range 37 {
		o := pod("ns"+fmt.Sprint(i%3), fmt.Sprintf("p-%d", i), "w")
		e := clientEdge(o, fmt.Sprintf("10.1.0.%d", i), "10.2.0.1", uint16(1000+i%5), uint64(1+i%4))
		if i%6 == 0 {
			e.ResetsRecv = map[string]uint64{"abort": uint64(i)}
		}
		es = append(es, e)
		hs = append(hs, holds(fmt.Sprintf("10.1.0.%d", i), o))
	}
	es = append(es, store.FlowEdge{Role: store.FlowOther, EdgesFolded: 120, HoldersLeftOut: 5, FlowCounters: store.FlowCounters{Opened: 300}})
	l.report("n1", 1, es, hs)
	// n2 folded no edge but left address holders out: its other edge
	// carries only that, and it counts as a capped node.
	l.report("n2", 1, []store.FlowEdge{{Role: store.FlowOther, HoldersLeftOut: 9}}, nil)
	for _, sort := range []string{"worst", "traffic"} {
		seen := map[string]int{}
		q := url.Values{"limit": {"5"}, "sort": {sort}}
		pages := 0
		var last apiMap
		for {
			m, _ := l.flowMap(staff, q)
			pages++
			for _, e := range m.Edges {
				seen[e.Key]++
			}
			last = m
			if m.NextCursor == nil {
				break
			}
			q.Set("cursor", *m.NextCursor)
			if pages > 20 {
				t.Fatal("paging does not end")
			}
		}
		if len(seen) != 37 || pages != 8 || last.TotalEdges != 37 {
			t.Fatalf("sort %s: %d pages saw %d edges of %d", sort, pages, len(seen), last.TotalEdges)
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("sort %s: edge %s seen %d times", sort, k, n)
			}
		}
		if last.Other.EdgesFolded != 120 || last.Other.Opened != 300 || last.Other.NodesCapped != 2 || last.Other.HoldersLeftOut != 14 {
			t.Errorf("other %+v", last.Other)
		}
	}
	m, _ := l.flowMap(staff, url.Values{"sort": {"worst"}, "limit": {"1"}})
	if m.Edges[0].State != "warn" || !strings.Contains(m.Edges[0].Explain, "36 resets in 1h") {
		t.Fatalf("worst first: %+v", m.Edges[0])
	}
	for _, c := range []struct {
		q    url.Values
		want int
	}{
		{url.Values{"namespace": {"ns1"}}, 12},
		{url.Values{"owner": {"P-1"}}, 11}, // p-1, p-10..p-19
		{url.Values{"owner": {"10.1.0.3"}}, 8},
		{url.Values{"label": {"zone=a"}}, 37},
		{url.Values{"label": {"zone=b"}}, 0},
	} {
		if m, _ := l.flowMap(staff, c.q); m.TotalEdges != c.want {
			t.Errorf("%s: %d edges, want %d", c.q.Encode(), m.TotalEdges, c.want)
		}
	}
}

// Every parameter a client controls is checked, and a bad one is a 400
// that names it.
func TestBadParameters(t *testing.T) {
	l := newLab(t)
	for _, c := range []struct {
		q    url.Values
		name string
	}{
		{url.Values{"window": {"0m"}}, "window"},
		{url.Values{"window": {"401d"}}, "window"},
		{url.Values{"window": {"soon"}}, "window"},
		{url.Values{"at": {"yesterday"}, "window": {"1h"}}, "at"},
		{url.Values{"from": {"2026-01-02T00:00:00Z"}, "to": {"2026-01-01T00:00:00Z"}}, "from"},
		{url.Values{"from": {"2020-01-01T00:00:00Z"}, "to": {"2026-01-01T00:00:00Z"}}, "400 days"},
		{url.Values{"sort": {"name"}}, "sort"},
		{url.Values{"limit": {"0"}}, "limit"},
		{url.Values{"limit": {"5001"}}, "limit"},
		{url.Values{"cursor": {"nope"}}, "cursor"},
		{url.Values{"label": {"novalue"}}, "label"},
		{url.Values{"owner": {strings.Repeat("x", 257)}}, "owner"},
		{url.Values{"vertex": {strings.Repeat("x", 513)}}, "vertex"},
		{url.Values{"namespace": {strings.Repeat("x", 254)}}, "namespace"},
		{url.Values{"format": {"xml"}}, "format"},
	} {
		code, body := l.get(staff, "/flows", c.q)
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.name) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.q.Encode(), code, body, c.name)
		}
	}
}

// vertex= keeps the edges of one vertex of the map exactly (the page's
// click on an owner): cart-1's, not cart-10's, whose name owner=cart-1
// also matches; and an address no owner explains is a vertex too.
func TestVertexFilter(t *testing.T) {
	l := newLab(t)
	l.node("n1", "acme")
	l.node("n2", "acme")
	cart1, cart10, db := pod("shop", "cart-1", "cart"), pod("shop", "cart-10", "cart"), pod("shop", "db-0", "db")
	l.report("n1", 0, []store.FlowEdge{
		clientEdge(cart1, "10.0.0.1", "10.0.0.3", 5432, 1),
		clientEdge(cart1, "10.0.0.1", "203.0.113.9", 443, 2),
		clientEdge(cart10, "10.0.0.10", "10.0.0.3", 5432, 3),
		clientEdge(cart10, "10.0.0.10", "203.0.113.7", 443, 4),
	}, []store.AddressHolder{holds("10.0.0.1", cart1), holds("10.0.0.10", cart10)})
	l.report("n2", 0, []store.FlowEdge{serverEdge(db, "10.0.0.3", 5432, "10.0.0.1", 1)}, []store.AddressHolder{holds("10.0.0.3", db)})

	for _, c := range []struct {
		q    url.Values
		want []string
	}{
		{url.Values{"vertex": {"n1|pod:shop.cart-1"}}, []string{
			"shop/cart-1 -> 203.0.113.9:443 opened=2 seen=client",
			"shop/cart-1 -> shop/db-0 opened=1 seen=client+server",
		}},
		// The server's end, whoever the client.
		{url.Values{"vertex": {"n2|pod:shop.db-0"}}, []string{
			"shop/cart-1 -> shop/db-0 opened=1 seen=client+server",
			"shop/cart-10 -> shop/db-0 opened=3 seen=client",
		}},
		{url.Values{"vertex": {"203.0.113.7"}}, []string{"shop/cart-10 -> 203.0.113.7:443 opened=4 seen=client"}},
		// An owner's key is not its name, and not another node's owner.
		{url.Values{"vertex": {"shop/cart-1"}}, nil},
		{url.Values{"vertex": {"n2|pod:shop.cart-1"}}, nil},
		// With another filter, both hold.
		{url.Values{"vertex": {"n2|pod:shop.db-0"}, "owner": {"cart-10"}}, []string{"shop/cart-10 -> shop/db-0 opened=3 seen=client"}},
		// What owner= (a substring) keeps for the same click: cart-10's too.
		{url.Values{"owner": {"cart-1"}}, []string{
			"shop/cart-1 -> 203.0.113.9:443 opened=2 seen=client",
			"shop/cart-1 -> shop/db-0 opened=1 seen=client+server",
			"shop/cart-10 -> 203.0.113.7:443 opened=4 seen=client",
			"shop/cart-10 -> shop/db-0 opened=3 seen=client",
		}},
	} {
		m, _ := l.flowMap(staff, c.q)
		same(t, c.q.Encode(), edges(m), c.want)
		if m.TotalEdges != len(c.want) {
			t.Errorf("%s: total_edges %d, want %d", c.q.Encode(), m.TotalEdges, len(c.want))
		}
	}
}
