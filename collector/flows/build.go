package flows

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// Owner is a node's owner that an edge's end refers to.
type Owner struct {
	Key       string `json:"key"`
	Node      string `json:"node"`
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Workload  string `json:"workload"`
	Namespace string `json:"namespace"`
	nodeID    int32
}

// End is one end of an edge.
type End struct {
	Owner   *string `json:"owner"`
	Address string  `json:"address"`
	Port    *int    `json:"port,omitempty"`
	Label   string  `json:"label"`
	Outside bool    `json:"outside"`
}

// Resets are an edge's resets by end and direction, by reason.
type Resets struct {
	ClientSent     map[string]uint64 `json:"client_sent"`
	ClientReceived map[string]uint64 `json:"client_received"`
	ServerSent     map[string]uint64 `json:"server_sent"`
	ServerReceived map[string]uint64 `json:"server_received"`
}

// Drops are an edge's drops by end, by reason.
type Drops struct {
	Client map[string]uint64 `json:"client"`
	Server map[string]uint64 `json:"server"`
}

// Edge is one edge of the map: the connections of a client end to a server
// end's port, over the window.
type Edge struct {
	Key         string   `json:"key"`
	Client      End      `json:"client"`
	Server      End      `json:"server"`
	SeenBy      []string `json:"seen_by"`
	Opened      uint64   `json:"opened"`
	Failed      uint64   `json:"failed"`
	Closed      uint64   `json:"closed"`
	Retransmits uint64   `json:"retransmits"`
	Resets      Resets   `json:"resets"`
	Drops       Drops    `json:"drops"`
	BytesC2S    uint64   `json:"bytes_client_to_server"`
	BytesS2C    uint64   `json:"bytes_server_to_client"`
	RTTP50      *float64 `json:"rtt_p50_ms"`
	RTTP99      *float64 `json:"rtt_p99_ms"`
	State       string   `json:"state"`
	Explain     string   `json:"explain"`

	client, server *half // what each end reported, nil when it did not
	// halves hold client's and server's: beside the edge, a row's edge
	// and half are one place in memory, not two (bench/flowmap: the
	// halves' own slab missed the cache once more a row).
	halves [2]half
	// nodeBuf holds nodes' first two (an edge is reported by one node or
	// two): beside the edge, as halves.
	nodeBuf    [2]int32
	nodes      []int32 // the reporting nodes
	clientNode int32   // the nodes of the ends' owners (0: an address)
	serverNode int32
}

// half is what one end reported of an edge: its counters, and per bucket.
type half struct {
	store.FlowCounters
	buckets map[int64]*store.FlowCounters // bucket start → counters
	rows    []store.FlowRowKey            // the node's edges it sums, each once
}

func (h *half) add(ts time.Time, c store.FlowCounters, series bool) {
	h.Add(c)
	if !series {
		return
	}
	if h.buckets == nil {
		h.buckets = map[int64]*store.FlowCounters{}
	}
	b := h.buckets[ts.Unix()]
	if b == nil {
		b = &store.FlowCounters{}
		h.buckets[ts.Unix()] = b
	}
	b.Add(c)
}

// Other is what agents folded past their top-K, in the selection.
type Other struct {
	EdgesFolded uint64 `json:"edges_folded"`
	Opened      uint64 `json:"opened"`
	Failed      uint64 `json:"failed"`
	Retransmits uint64 `json:"retransmits"`
	Resets      uint64 `json:"resets"`
	Drops       uint64 `json:"drops"`
	Bytes       uint64 `json:"bytes"`
	NodesCapped int    `json:"nodes_capped"`
	// HoldersLeftOut: address holders agents left out of their reports
	// past the most a report carries; peers at those addresses resolve to
	// no owner (an agent with more addresses than wire.MaxAddressHolders
	// between two reports: pod churn).
	HoldersLeftOut uint64 `json:"holders_left_out"`
}

// Input is what a map is built from: the nodes the caller sees, their
// edges and the address holders over the window.
type Input struct {
	Nodes    map[int32]store.FlowNode
	Rows     store.FlowRows
	Holders  []store.FlowHolder
	Res      time.Duration // of the series' buckets
	From, To time.Time
	// Hide says an owner is not the caller's to see (a customer's view of
	// processes and network namespaces): its end is shown as its address.
	Hide func(store.FlowOwner) bool
	// Series keeps each edge's counters per bucket (the edge detail).
	Series bool
}

// Graph is a built map: every edge of the input, not yet filtered, sorted
// or paged.
type Graph struct {
	Edges  []*Edge
	Owners map[string]Owner
	Other  Other
	window time.Duration
	owned  map[nodeOwner]*Owner // owner's answers while building
	keyed  map[string]*Owner    // the same by key: one pointer an owner
	refs   endRefs
}

type nodeOwner struct {
	node int32
	id   string
}

// holderIndex finds who held an address when, within a tenant.
type holderIndex map[tenantAddr]*holderList

type tenantAddr struct{ tenant, address string }

// holderList is the spans of one address in one tenant, and the map's
// owner of each once Build has asked (a holder is a peer of many rows:
// looking its owner up again per row was a tenth of a map's build).
type holderList struct {
	hs []store.FlowHolder
	// spans are hs' spans in Unix ns, apart: bestIn reads them for every
	// row, and a holder is 150 bytes, most of them not its span.
	spans    []holderSpan
	owners   []*Owner
	resolved []bool
}

type holderSpan struct{ first, last int64 }

func newHolderIndex(hs []store.FlowHolder) holderIndex {
	idx := holderIndex{}
	for _, h := range hs {
		k := tenantAddr{h.Tenant, h.Address}
		l := idx[k]
		if l == nil {
			l = &holderList{}
			idx[k] = l
		}
		l.hs = append(l.hs, h)
		l.spans = append(l.spans, holderSpan{h.First.UnixNano(), h.Last.UnixNano()})
		l.owners, l.resolved = append(l.owners, nil), append(l.resolved, false)
	}
	return idx
}

// spans is the spans of address in tenant.
func (idx holderIndex) spans(tenant, address string) []store.FlowHolder {
	if l := idx[tenantAddr{tenant, address}]; l != nil {
		return l.hs
	}
	return nil
}

// best is the holder of address in tenant whose span overlaps [from, to)
// the longest (ties: the newest span, then the first indexed), found
// without sorting: a map's first read asks it for every row.
func (idx holderIndex) best(tenant, address string, from, to time.Time) (store.FlowHolder, bool) {
	l, i := idx.bestIn(tenant, address, from, to)
	if i < 0 {
		return store.FlowHolder{}, false
	}
	return l.hs[i], true
}

// bestIn is best as its list and index (-1: none).
func (idx holderIndex) bestIn(tenant, address string, from, to time.Time) (*holderList, int) {
	l := idx[tenantAddr{tenant, address}]
	if l == nil {
		return nil, -1
	}
	found := -1
	var bestOverlap int64
	f, t := from.UnixNano(), to.UnixNano()
	for i, h := range l.spans {
		if h.first >= t || h.last <= f {
			continue
		}
		o := min(h.last, t) - max(h.first, f)
		if found < 0 || o > bestOverlap || (o == bestOverlap && h.first > l.spans[found].first) {
			found, bestOverlap = i, o
		}
	}
	return l, found
}

// ambiguous says whether more than one owner held address in tenant
// during [from, to), without sorting (build_test.go holds the sorting
// reference it is tested against).
func (idx holderIndex) ambiguous(tenant, address string, from, to time.Time) bool {
	var first *store.FlowHolder
	hs := idx.spans(tenant, address)
	for i, h := range hs {
		if !h.First.Before(to) || !h.Last.After(from) {
			continue
		}
		if first == nil {
			first = &hs[i]
			continue
		}
		if h.NodeID != first.NodeID || h.Owner.ID != first.Owner.ID {
			return true
		}
	}
	return false
}

// anyShared says whether some address was held by more than one owner
// (on any node, at any time).
func (idx holderIndex) anyShared() bool {
	for _, l := range idx {
		for _, h := range l.hs[1:] {
			if h.NodeID != l.hs[0].NodeID || h.Owner.ID != l.hs[0].Owner.ID {
				return true
			}
		}
	}
	return false
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Ambiguous lists the peer addresses of rows (summed over the window) that
// more than one holder of their tenant held during the row's buckets:
// those rows must be read per bucket, so that each bucket goes to its own
// holder (a pod address reused by another workload).
func Ambiguous(rows store.FlowRows, holders []store.FlowHolder) []string {
	idx := newHolderIndex(holders)
	// Most windows have no address that two owners held: then no row
	// needs asking (100,000 of them in a map's first read).
	if !idx.anyShared() {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for r := range rows.All() {
		if r.Role == store.FlowOther {
			continue
		}
		addr, _ := peerOf(r.FlowEdge)
		if seen[addr] {
			continue
		}
		if idx.ambiguous(r.Tenant, addr, r.First, r.End) {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// loopback says addr is a loopback address (127.0.0.0/8, ::1).
func loopback(addr string) bool {
	if !strings.HasPrefix(addr, "127.") && !strings.Contains(addr, ":") {
		return false // IPv4, not 127.0.0.0/8: no parse for most rows
	}
	a, err := netip.ParseAddr(addr)
	return err == nil && a.Unmap().IsLoopback()
}

// peerOf is the address and port an edge's peer is resolved by: a client's
// translated peer when its node translated it (the backend behind a
// Service address), else the peer as the socket saw it. A server edge's
// peer port is the client's ephemeral one, left out.
func peerOf(e store.FlowEdge) (string, uint16) {
	if e.Role == store.FlowClient && e.XlatAddr != "" {
		return e.XlatAddr, e.XlatPort
	}
	return e.PeerAddr, e.PeerPort
}

// Build builds the map of in.
func Build(in Input) *Graph {
	g := &Graph{Owners: map[string]Owner{}, window: in.To.Sub(in.From), owned: map[nodeOwner]*Owner{}, keyed: map[string]*Owner{},
		refs: endRefs{addrs: map[string]uint32{}, tenants: map[string]uint32{}}}
	idx := newHolderIndex(in.Holders)
	// The addresses each tenant's owners held at any time of the window:
	// an address no holder explains is outside.
	held := map[tenantAddr]bool{}
	for _, h := range in.Holders {
		if h.First.Before(in.To) && h.Last.After(in.From) {
			held[tenantAddr{h.Tenant, h.Address}] = true
		}
	}
	hide := in.Hide
	if hide == nil {
		hide = func(store.FlowOwner) bool { return false }
	}
	nRows := in.Rows.Len()
	byKey := make(map[edgeID]*Edge, nRows/2)
	capped := map[int32]bool{}
	// A map of 50,000 edges made a million small objects: its edges,
	// halves, their rows and ports are cut from slabs instead, and the
	// empty reason maps and seen_by lists are shared (read only, as every
	// answer's parts are). bench/flowmap: allocation and its collection
	// were most of Build.
	sl := newSlabs(nRows)
	var kb keyBuf
	// Rows come a node's owner at a time: its node and owner are most
	// often the row before's.
	var node store.FlowNode
	var nodeOK bool
	var lastLocal struct {
		node  int32
		o     store.FlowOwner
		owner *Owner
		ok    bool
	}
	for r := range in.Rows.All() {
		if !nodeOK || node.ID != r.NodeID {
			if node, nodeOK = in.Nodes[r.NodeID]; !nodeOK {
				continue
			}
		}
		if r.Role == store.FlowOther {
			o := &g.Other
			o.EdgesFolded += r.EdgesFolded
			o.HoldersLeftOut += r.HoldersLeftOut
			o.Opened += r.Opened
			o.Failed += r.Failed
			o.Retransmits += r.Retransmits
			o.Resets += sum(r.ResetsSent) + sum(r.ResetsRecv)
			o.Drops += sum(r.Drops)
			o.Bytes += r.BytesSent + r.BytesRecv
			capped[r.NodeID] = true
			continue
		}
		local := end{address: r.LocalAddr}
		if !lastLocal.ok || lastLocal.node != r.NodeID || lastLocal.o != r.Local {
			lastLocal.node, lastLocal.o, lastLocal.owner, lastLocal.ok = r.NodeID, r.Local, nil, true
			if !hide(r.Local) {
				lastLocal.owner = g.owner(node, r.Local)
			}
		}
		local.owner = lastLocal.owner
		peerAddr, peerPort := peerOf(r.FlowEdge)
		peer := end{address: peerAddr}
		if loopback(peerAddr) {
			// A loopback connection never leaves its network namespace:
			// its peer is the local owner itself, on this node, whatever
			// other nodes and namespaces hold the same address.
			peer.owner, peer.held = local.owner, true
		} else if l, i := idx.bestIn(r.Tenant, peerAddr, r.First, r.End); i >= 0 {
			if !l.resolved[i] {
				if h := l.hs[i]; !hide(h.Owner) {
					if hn, ok := in.Nodes[h.NodeID]; ok {
						l.owners[i] = g.owner(hn, h.Owner)
					}
				}
				l.resolved[i] = true
			}
			peer.owner = l.owners[i]
			peer.held = true
		} else {
			peer.held = held[tenantAddr{r.Tenant, peerAddr}]
		}
		local.held = true
		var client, server end
		var port uint16
		var role string
		switch r.Role {
		case store.FlowClient:
			client, server, port, role = local, peer, peerPort, "client"
		case store.FlowServer:
			client, server, port, role = peer, local, r.LocalPort, "server"
		default:
			continue
		}
		id := edgeID{client.owner, server.owner, g.refs.addr(client), g.refs.addr(server), port, g.refs.tenant(r.Tenant)}
		e := byKey[id]
		if e == nil {
			e = sl.edge()
			e.Key = kb.key(client, server, port, r.Tenant)
			e.Client, e.Server = client.api(0, nil), server.api(port, sl.port(port))
			if client.owner != nil {
				e.clientNode = client.owner.nodeID
			}
			if server.owner != nil {
				e.serverNode = server.owner.nodeID
			}
			byKey[id] = e
			g.Edges = append(g.Edges, e)
		}
		h, mine := &e.client, &e.halves[0]
		if role == "server" {
			h, mine = &e.server, &e.halves[1]
		}
		if *h == nil {
			*h = mine
		}
		(*h).add(r.First.Truncate(in.Res), r.FlowCounters, in.Series)
		// A half sums a row or a few (more only where per-bucket rows of
		// a reused address were read): a list beats a map per half. Its
		// first row is a slab's, of capacity one: a second is appended to
		// a copy.
		if k := r.Key(); (*h).rows == nil {
			(*h).rows = sl.row(k)
		} else if !slices.Contains((*h).rows, k) {
			(*h).rows = append((*h).rows, k)
		}
		if e.nodes == nil {
			e.nodeBuf[0] = r.NodeID
			e.nodes = e.nodeBuf[:1:2]
		} else if !slices.Contains(e.nodes, r.NodeID) {
			e.nodes = append(e.nodes, r.NodeID)
		}
	}
	g.Other.NodesCapped = len(capped)
	g.owned, g.keyed, g.refs = nil, nil, endRefs{}
	shared := newShared()
	for _, e := range g.Edges {
		e.finish(g.window, shared)
	}
	return g
}

// slabs hand out a build's edges (with their halves and nodes), rows and
// ports from a few large allocations.
type slabs struct {
	n     int // the chunk: at most the rows, so a small map stays small
	edges []Edge
	rows  []store.FlowRowKey
	ports []int
}

func newSlabs(rows int) *slabs { return &slabs{n: max(1, min(rows, 4096))} }

func take[T any](s *[]T, n int) *T {
	if len(*s) == cap(*s) {
		*s = make([]T, 0, n)
	}
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}

func (s *slabs) edge() *Edge { return take(&s.edges, s.n) }

// row is a list of k of capacity one.
func (s *slabs) row(k store.FlowRowKey) []store.FlowRowKey {
	if len(s.rows) == cap(s.rows) {
		s.rows = make([]store.FlowRowKey, 0, s.n)
	}
	i := len(s.rows)
	s.rows = append(s.rows, k)
	return s.rows[i : i+1 : i+1]
}

// port is a pointer to port, nil for 0.
func (s *slabs) port(port uint16) *int {
	if port == 0 {
		return nil
	}
	p := take(&s.ports, s.n)
	*p = int(port)
	return p
}

// shared are the read-only parts that many edges of a build have alike.
type shared struct {
	empty                      map[string]uint64
	client, server, clientServ []string
}

func newShared() *shared {
	return &shared{empty: map[string]uint64{}, client: []string{"client"}, server: []string{"server"}, clientServ: []string{"client", "server"}}
}

// edgeID is a map edge's identity, as end.id() tells ends apart: an
// owner end by its Owner (one an owner key, Graph.owner), an address end
// by the address's number in the build (endRefs); its port; its tenant's
// number. Without strings it hashes in a fraction of the time, and the
// map of 50,000 edges is half the size: the lookup is per row, and most
// of its cost was missing the cache (bench/flowmap).
type edgeID struct {
	client, server         *Owner
	clientAddr, serverAddr uint32 // 0: an owner end
	port                   uint16
	tenant                 uint32
}

// endRefs numbers a build's address ends and tenants.
type endRefs struct {
	addrs   map[string]uint32
	tenants map[string]uint32
	// lastTenant: rows come a node at a time, most of one tenant.
	lastTenant string
	lastID     uint32
}

// addr is an address end's number; 0 for an owner end.
func (r *endRefs) addr(e end) uint32 {
	if e.owner != nil {
		return 0
	}
	n, ok := r.addrs[e.address]
	if !ok {
		n = uint32(len(r.addrs) + 1)
		r.addrs[e.address] = n
	}
	return n
}

func (r *endRefs) tenant(t string) uint32 {
	if r.lastID != 0 && r.lastTenant == t {
		return r.lastID
	}
	n, ok := r.tenants[t]
	if !ok {
		n = uint32(len(r.tenants) + 1)
		r.tenants[t] = n
	}
	r.lastTenant, r.lastID = t, n
	return n
}

// end is an edge's end while the map is built.
type end struct {
	owner   *Owner
	address string
	held    bool // some holder of the tenant held the address in the window
}

func (e end) id() string {
	p, s := e.idParts()
	return p + s
}

// idParts is id() in two parts, not joined.
func (e end) idParts() (prefix, s string) {
	if e.owner != nil {
		return "o:", e.owner.Key
	}
	return "a:", e.address
}

// api is the end as the answer has it; p points to port (nil: none). Its
// owner points to the owner's key: both are read only.
func (e end) api(port uint16, p *int) End {
	out := End{Address: e.address, Label: e.address, Outside: e.owner == nil && !e.held, Port: p}
	if port != 0 {
		out.Label = hostPort(e.address, port)
	}
	if e.owner != nil {
		out.Owner = &e.owner.Key
		out.Label = e.owner.Name
		if out.Label == "" {
			out.Label = e.owner.ID
		}
	}
	return out
}

func hostPort(addr string, port uint16) string {
	if !strings.Contains(addr, ":") { // not IPv6: no parse, no fmt
		return addr + ":" + strconv.Itoa(int(port))
	}
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

// owner is the map's owner o of node n, added to the owners once.
// The answer is shared: callers only read it.
func (g *Graph) owner(n store.FlowNode, o store.FlowOwner) *Owner {
	nk := nodeOwner{n.ID, o.ID}
	if have := g.owned[nk]; have != nil {
		return have
	}
	key := n.Name + "|" + o.ID
	if have := g.keyed[key]; have != nil {
		g.owned[nk] = have
		return have
	}
	ow := &Owner{Key: key, Node: n.Name, ID: o.ID, Kind: o.Kind, Name: o.Name, Workload: o.Workload, Namespace: namespaceOf(o), nodeID: n.ID}
	g.Owners[key] = *ow
	g.keyed[key] = ow
	g.owned[nk] = ow
	return ow
}

// namespaceOf is a pod's or its container's Kubernetes namespace: agents
// name pods namespace/name (agent/owner).
func namespaceOf(o store.FlowOwner) string {
	if o.Kind != "pod" && o.Kind != "container" {
		return ""
	}
	for _, s := range []string{o.Name, o.Workload} {
		if ns, _, ok := strings.Cut(s, "/"); ok {
			return ns
		}
	}
	return ""
}

// edgeKey is an edge's opaque key: its ends, port and tenant, base64url
// of JSON, so the detail can find it again over any window. The tenant
// keeps two tenants' look-alike edges apart (staff see both; a node that
// changed tenant keeps its name).
func edgeKey(client, server string, port uint16, tenant string) string {
	var kb keyBuf
	return kb.write("", client, "", server, port, tenant)
}

// keyBuf writes edge keys with one allocation each, the key: a map's
// first read makes 50,000.
type keyBuf struct{ js, b64 []byte }

// key is edgeKey(client.id(), server.id(), port, tenant).
func (kb *keyBuf) key(client, server end, port uint16, tenant string) string {
	cp, cs := client.idParts()
	sp, ss := server.idParts()
	return kb.write(cp, cs, sp, ss, port, tenant)
}

// write is edgeKey of the ends cp+cs and sp+ss. The prefixes are plain.
func (kb *keyBuf) write(cp, cs, sp, ss string, port uint16, tenant string) string {
	// json.Marshal's bytes, written directly when no string needs
	// escaping.
	if !plainJSON(cs) || !plainJSON(ss) || !plainJSON(tenant) {
		b, _ := json.Marshal([]any{cp + cs, sp + ss, port, tenant})
		return base64.RawURLEncoding.EncodeToString(b)
	}
	b := append(kb.js[:0], `["`...)
	b = append(append(b, cp...), cs...)
	b = append(b, `","`...)
	b = append(append(b, sp...), ss...)
	b = append(b, `",`...)
	b = strconv.AppendUint(b, uint64(port), 10)
	b = append(b, `,"`...)
	b = append(b, tenant...)
	b = append(b, `"]`...)
	kb.js = b
	kb.b64 = base64.RawURLEncoding.AppendEncode(kb.b64[:0], b)
	return string(kb.b64)
}

// plainJSON says encoding/json writes s as itself between quotes: printable
// ASCII without the characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// parseKey decodes a key made by edgeKey.
func parseKey(key string) (client, server string, port uint16, err error) {
	b, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return "", "", 0, fmt.Errorf("not an edge key")
	}
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || len(v) != 4 {
		return "", "", 0, fmt.Errorf("not an edge key")
	}
	var p int
	var tenant string
	if json.Unmarshal(v[0], &client) != nil || json.Unmarshal(v[1], &server) != nil || json.Unmarshal(v[2], &p) != nil || p < 0 || p > 65535 ||
		json.Unmarshal(v[3], &tenant) != nil {
		return "", "", 0, fmt.Errorf("not an edge key")
	}
	return client, server, uint16(p), nil
}

// finish computes an edge's figures from what its ends reported: each
// count from the end that measures it (connects and bytes sent from the
// client when it reported, else the server), resets and drops per end,
// retransmits summed (each end retransmits its own segments), RTT from
// the client's samples, else the server's.
//
// sh, when not nil, holds the empty map and seen_by lists the edge shares
// with others (read only); nil makes the edge its own.
func (e *Edge) finish(window time.Duration, sh *shared) {
	if sh == nil {
		sh = newShared()
	}
	orEmpty := func(m map[string]uint64) map[string]uint64 {
		if m == nil {
			return sh.empty
		}
		return m
	}
	c, s := e.client, e.server
	switch {
	case c != nil && s != nil:
		e.SeenBy = sh.clientServ
	case c != nil:
		e.SeenBy = sh.client
	case s != nil:
		e.SeenBy = sh.server
	default:
		e.SeenBy = nil
	}
	e.Resets, e.Drops = Resets{}, Drops{}
	if c != nil {
		e.Opened, e.Failed, e.Closed = c.Opened, c.Failed, c.Closed
		e.BytesC2S, e.BytesS2C = c.BytesSent, c.BytesRecv
		e.Retransmits += c.Retransmits
		e.Resets.ClientSent, e.Resets.ClientReceived, e.Drops.Client = orEmpty(c.ResetsSent), orEmpty(c.ResetsRecv), orEmpty(c.Drops)
	}
	if s != nil {
		if c == nil {
			e.Opened, e.Failed, e.Closed = s.Opened, s.Failed, s.Closed
			e.BytesC2S, e.BytesS2C = s.BytesRecv, s.BytesSent
		}
		e.Retransmits += s.Retransmits
		e.Resets.ServerSent, e.Resets.ServerReceived, e.Drops.Server = orEmpty(s.ResetsSent), orEmpty(s.ResetsRecv), orEmpty(s.Drops)
	}
	e.Resets.ClientSent, e.Resets.ClientReceived, e.Drops.Client = orEmpty(e.Resets.ClientSent), orEmpty(e.Resets.ClientReceived), orEmpty(e.Drops.Client)
	e.Resets.ServerSent, e.Resets.ServerReceived, e.Drops.Server = orEmpty(e.Resets.ServerSent), orEmpty(e.Resets.ServerReceived), orEmpty(e.Drops.Server)
	e.setRTT()
	e.State, e.Explain = State(e.figures(), window)
}

// setRTT sets the RTT percentiles from the client's samples, else the
// server's.
func (e *Edge) setRTT() {
	var rtt map[int32]uint64
	if e.client != nil {
		rtt = e.client.RTT
	}
	if len(rtt) == 0 && e.server != nil {
		rtt = e.server.RTT
	}
	e.RTTP50, e.RTTP99 = quantileMS(rtt, 0.5), quantileMS(rtt, 0.99)
}

func (e *Edge) figures() Figures {
	return Figures{Opened: e.Opened, Failed: e.Failed, Retransmits: e.Retransmits, Bytes: e.BytesC2S + e.BytesS2C,
		ClientSent: e.Resets.ClientSent, ClientReceived: e.Resets.ClientReceived, ServerSent: e.Resets.ServerSent, ServerReceived: e.Resets.ServerReceived,
		ClientDrops: e.Drops.Client, ServerDrops: e.Drops.Server}
}

// quantileMS is the q-quantile of an RTT histogram (ns buckets) in ms; nil
// without samples.
func quantileMS(buckets map[int32]uint64, q float64) *float64 {
	if len(buckets) == 0 {
		return nil
	}
	h := loglinear.New()
	for i, n := range buckets {
		h.AddBucket(uint32(i), n)
	}
	v := h.Quantile(q) / 1e6
	if v != v { // NaN
		return nil
	}
	v = float64(int64(v*1000+0.5)) / 1000
	return &v
}

// badness orders edges within a state: the most resets, failures and drops
// first.
func (e *Edge) badness() uint64 {
	f := e.figures()
	return max(sum(f.ClientSent)+sum(f.ClientReceived), sum(f.ServerSent)+sum(f.ServerReceived)) + e.Failed + sum(f.ClientDrops) + sum(f.ServerDrops)
}

func stateRank(s string) int {
	switch s {
	case "crit":
		return 2
	case "warn":
		return 1
	}
	return 0
}
