package flows

import (
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/topk"
)

// Limits of the API (docs/flow-map.md, "Limits"; openapi.json).
const (
	DefaultLimit  = 500
	MaxLimit      = 5000
	DefaultWindow = time.Hour
	MinWindow     = time.Minute
	MaxWindow     = 400 * 24 * time.Hour
	maxLabels     = 16
	maxParamLen   = 256
	// maxVertex bounds vertex=: an owner key is a node name (≤ 253) and an
	// owner id (≤ 255) joined by "|".
	maxVertex    = 512
	maxNamespace = 253
	maxCursor    = 512
	maxKey       = 1024
	// A window of up to minuteWindow is rounded to minutes, up to
	// hourWindow to hours, a longer one to days. Coarser than the tree's
	// time travel (collector/api/treeat.go), which reads one node: a map
	// reads every edge of the fleet, and a bucket is a row per edge — the
	// last hour is two hour rows, not sixty minutes (bench/flowmap).
	minuteWindow = 15 * time.Minute
	hourWindow   = 48 * time.Hour
	// One edge's detail reads only its ends' rows, and is rounded as the
	// tree's time travel is: its series a point a minute for a day.
	detailMinuteWindow = 24 * time.Hour
	detailHourWindow   = 60 * 24 * time.Hour
	// maxSeries bounds the detail's points.
	maxSeries = 1440
)

// Reads are the store's reads the map needs (store.Reads).
type Reads interface {
	FlowNodesIn(ctx context.Context, scope store.Scope) ([]store.FlowNode, error)
	ReadFlowEdges(ctx context.Context, q store.FlowRead) (store.FlowRows, error)
	ReadFlowHolders(ctx context.Context, nodes []int32, from, to time.Time) ([]store.FlowHolder, error)
	ReadFlowRTT(ctx context.Context, sources []store.FlowSource, keys []store.FlowRowKey) (map[store.FlowRowKey]map[int32]uint64, error)
}

// Service serves the flow map (api.FlowHandlers).
type Service struct {
	reads Reads
	log   *slog.Logger
	now   func() time.Time
	cache graphCache
}

var _ api.FlowHandlers = (*Service)(nil)

// New is the map over reads.
func New(reads Reads, log *slog.Logger) *Service {
	return &Service{reads: reads, log: log, now: time.Now}
}

// Window is the time a map covers: buckets of Res starting in [From, To).
type Window struct {
	From, To time.Time
	Res      time.Duration
}

// Resolution names Res as the API does.
func (w Window) Resolution() string {
	switch w.Res {
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	}
	return "minute"
}

func invalid(format string, args ...any) error {
	return errkind.Errorf(errkind.Invalid, format, args...)
}

// parseDuration reads 90s, 5m, 1h, 7d.
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 100000 {
			return 0, fmt.Errorf("%s is not a duration like 5m, 1h or 7d", api.Quote(s))
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s is not a duration like 5m, 1h or 7d", api.Quote(s))
	}
	return d, nil
}

// ParseWindow reads window, at, from and to as the tree's time travel
// does: to defaults to at, else now; from to window before to.
func ParseWindow(q url.Values, now time.Time) (Window, error) {
	return parseWindow(q, now, minuteWindow, hourWindow)
}

// ParseDetailWindow is ParseWindow for one edge's detail.
func ParseDetailWindow(q url.Values, now time.Time) (Window, error) {
	return parseWindow(q, now, detailMinuteWindow, detailHourWindow)
}

func parseWindow(q url.Values, now time.Time, minuteWindow, hourWindow time.Duration) (Window, error) {
	var w Window
	window := DefaultWindow
	if s := q.Get("window"); s != "" {
		d, err := parseDuration(s)
		if err != nil {
			return w, invalid("window: %v", err)
		}
		if d < MinWindow || d > MaxWindow {
			return w, invalid("window: %s must be from 1m to 400d", api.Quote(s))
		}
		window = d
	}
	to := now
	if s := q.Get("at"); s != "" {
		t, err := api.ParseTime(s)
		if err != nil {
			return w, invalid("at: %v", err)
		}
		to = t
	}
	if s := q.Get("to"); s != "" {
		t, err := api.ParseTime(s)
		if err != nil {
			return w, invalid("to: %v", err)
		}
		to = t
	}
	from := to.Add(-window)
	if s := q.Get("from"); s != "" {
		t, err := api.ParseTime(s)
		if err != nil {
			return w, invalid("from: %v", err)
		}
		from = t
	}
	if !from.Before(to) {
		return w, invalid("from (%s) must be before to (%s)", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	if to.Sub(from) > MaxWindow {
		return w, invalid("from %s to %s is longer than 400 days", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	switch d := to.Sub(from); {
	case d <= minuteWindow:
		w.Res = time.Minute
	case d <= hourWindow:
		w.Res = time.Hour
	default:
		w.Res = 24 * time.Hour
	}
	// Whole buckets, rounded out: a bucket is counted whole or not at
	// all, and the last hour at 13:05 is 12:00 to 14:00, not the five
	// minutes of the current hour.
	w.From = from.UTC().Truncate(w.Res)
	w.To = to.UTC().Truncate(w.Res)
	if w.To.Before(to) {
		w.To = w.To.Add(w.Res)
	}
	return w, nil
}

// Filter narrows a map's edges.
type Filter struct {
	// Tenant keeps the edges of this tenant's nodes (staff only).
	Tenant *string
	// Labels: an end's node has every one.
	Labels map[string]string
	// Namespace: an end's owner is in it.
	Namespace string
	// Owner: an end's owner name, workload or id, or its address,
	// contains it, ignoring case.
	Owner string
	// Vertex: an end is this vertex of the map, exactly: an owner's key
	// (node|id), or the address of an end no owner explains. The page
	// filters by a vertex clicked; Owner's substring would also keep
	// cart-10's edges for cart-1.
	Vertex string
}

// Query is a parsed GET /flows.
type Query struct {
	Window
	Filter
	Sort   string
	Limit  int
	Cursor *cursor
	CSV    bool
}

func parseQuery(r *http.Request, now time.Time, staff bool) (Query, error) {
	q := r.URL.Query()
	var out Query
	var err error
	if out.Window, err = ParseWindow(q, now); err != nil {
		return out, err
	}
	if vs, ok := q["tenant"]; ok {
		if !staff {
			return out, invalid("tenant: a customer sees its own tenant's map; leave tenant out")
		}
		if len(vs) != 1 || len(vs[0]) > maxParamLen {
			return out, invalid("tenant: give one, of at most %d bytes", maxParamLen)
		}
		out.Tenant = &vs[0]
	}
	if ls := q["label"]; len(ls) > 0 {
		if len(ls) > maxLabels {
			return out, invalid("label: %d given, at most %d", len(ls), maxLabels)
		}
		out.Labels = map[string]string{}
		for _, l := range ls {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" || len(l) > maxParamLen {
				return out, invalid("label: %s is not key=value of at most %d bytes", api.Quote(l), maxParamLen)
			}
			out.Labels[k] = v
		}
	}
	if out.Namespace = q.Get("namespace"); len(out.Namespace) > maxNamespace {
		return out, invalid("namespace: at most %d bytes", maxNamespace)
	}
	if out.Owner = q.Get("owner"); len(out.Owner) > maxParamLen {
		return out, invalid("owner: at most %d bytes", maxParamLen)
	}
	if out.Vertex = q.Get("vertex"); len(out.Vertex) > maxVertex {
		return out, invalid("vertex: at most %d bytes", maxVertex)
	}
	switch out.Sort = q.Get("sort"); out.Sort {
	case "":
		out.Sort = "worst"
	case "worst", "traffic":
	default:
		return out, invalid("sort: %s is not worst or traffic", api.Quote(out.Sort))
	}
	out.Limit = DefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return out, invalid("limit: %s is not a number from 1 to %d", api.Quote(s), MaxLimit)
		}
		out.Limit = n
	}
	if s := q.Get("cursor"); s != "" {
		c, err := parseCursor(s)
		if err != nil || c.S != out.Sort {
			return out, invalid("cursor: %s is not a next_cursor of this query (sort %s)", api.Quote(s), out.Sort)
		}
		out.Cursor = &c
	}
	switch f := q.Get("format"); f {
	case "", "json":
		out.CSV = f == "" && acceptsCSV(r)
	case "csv":
		out.CSV = true
	default:
		return out, invalid("format: %s is not json or csv", api.Quote(f))
	}
	return out, nil
}

func acceptsCSV(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, _ := strings.Cut(strings.TrimSpace(a), ";"); strings.EqualFold(mt, "text/csv") {
			return true
		}
	}
	return false
}

// cursor is where a page ended: the sort key of its last edge.
type cursor struct {
	S string `json:"s"`
	R int    `json:"r"`
	A uint64 `json:"a"`
	B uint64 `json:"b"`
	K string `json:"k"`
}

func parseCursor(s string) (cursor, error) {
	var c cursor
	if len(s) > maxCursor {
		return c, fmt.Errorf("too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, err
	}
	err = json.Unmarshal(b, &c)
	return c, err
}

func (c cursor) String() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sortKey is an edge's place in a sort: rank, then A, then B, each
// highest first, then the key.
func sortKey(e *Edge, by string) cursor {
	if by == "traffic" {
		return cursor{S: by, A: e.Opened, B: e.BytesC2S + e.BytesS2C, K: e.Key}
	}
	return cursor{S: by, R: stateRank(e.State), A: e.badness(), B: e.Retransmits, K: e.Key}
}

func compareKeys(x, y cursor) int {
	switch {
	case x.R != y.R:
		return y.R - x.R
	case x.A != y.A:
		if x.A > y.A {
			return -1
		}
		return 1
	case x.B != y.B:
		if x.B > y.B {
			return -1
		}
		return 1
	}
	return strings.Compare(x.K, y.K)
}

// Map is the answer of GET /flows.
type Map struct {
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Resolution string    `json:"resolution"`
	Owners     []Owner   `json:"owners"`
	Edges      []*Edge   `json:"edges"`
	Other      Other     `json:"other"`
	TotalEdges int       `json:"total_edges"`
	NextCursor *string   `json:"next_cursor"`
}

// staffOwner says an owner is staff's to see (collector/api/customer.go):
// a process or a network namespace of the node, not a customer's pod.
func staffOwner(o store.FlowOwner) bool { return api.StaffMetric("flow/" + o.ID) }

// graph builds the map of the window for the caller: its nodes, their
// edges, and the holders of their tenants' addresses.
// endFilter narrows the read of one edge's detail to the rows of its
// ends: those of an owner end's owner, or of an address end's address.
type endFilter struct{ owners, addrs []string }

func (s *Service) graph(ctx context.Context, scope store.Scope, customer bool, w Window, tenant *string, series bool, ends endFilter) (*Graph, map[int32]store.FlowNode, error) {
	all, err := s.reads.FlowNodesIn(ctx, scope)
	if err != nil {
		return nil, nil, err
	}
	nodes := map[int32]store.FlowNode{}
	var ids []int32
	for _, n := range all {
		if tenant != nil && n.Tenant != *tenant {
			continue
		}
		nodes[n.ID] = n
		ids = append(ids, n.ID)
	}
	in := Input{Nodes: nodes, Res: w.Res, From: w.From, To: w.To, Series: series}
	if customer {
		in.Hide = staffOwner
	}
	if len(ids) == 0 {
		return Build(in), nodes, nil
	}
	read := store.FlowRead{Nodes: ids, Sources: store.FlowSources(w.From, w.To), PerBucket: series, RTT: series}
	if series {
		// A series point per bucket of the window's resolution.
		read.Sources = []store.FlowSource{{Res: int32(w.Res / time.Second), From: w.From, To: w.To}}
		read.OwnerIDs, read.LocalAddrs = ends.owners, ends.addrs
	}
	if in.Rows, err = s.reads.ReadFlowEdges(ctx, read); err != nil {
		return nil, nil, err
	}
	if in.Holders, err = s.reads.ReadFlowHolders(ctx, ids, w.From, w.To); err != nil {
		return nil, nil, err
	}
	// An address two owners held within an edge's buckets: read those
	// edges per bucket (by the minute where minutes are still kept), each
	// bucket resolved by its own holder.
	if amb := Ambiguous(in.Rows, in.Holders); len(amb) > 0 {
		ambSet := map[string]bool{}
		for _, a := range amb {
			ambSet[a] = true
		}
		isAmb := func(r store.FlowEdgeRow) bool {
			return r.Role != store.FlowOther && (ambSet[r.PeerAddr] || ambSet[r.XlatAddr])
		}
		var per []store.FlowEdgeRow
		if series {
			for r := range in.Rows.All() {
				if isAmb(*r) {
					per = append(per, *r)
				}
			}
		} else {
			read.PerBucket, read.PeerAddrs = true, amb
			rows, err := s.reads.ReadFlowEdges(ctx, read)
			if err != nil {
				return nil, nil, err
			}
			per = rows.Slice()
		}
		read.PerBucket, read.PeerAddrs = true, amb
		if per, err = s.minutesOf(ctx, read, per, w); err != nil {
			return nil, nil, err
		}
		var kept store.FlowRows
		for _, c := range in.Rows {
			kept = append(kept, slices.DeleteFunc(c, isAmb))
		}
		in.Rows = append(kept, per)
	}
	return Build(in), nodes, nil
}

// minutesOf replaces the hour or day buckets of per by their minutes where
// those are still kept: a pod address reused within an hour resolves by
// the minute, as in a window of a day or less.
func (s *Service) minutesOf(ctx context.Context, read store.FlowRead, per []store.FlowEdgeRow, w Window) ([]store.FlowEdgeRow, error) {
	coarse := false
	for _, r := range per {
		coarse = coarse || r.End.Sub(r.First) > time.Minute
	}
	if !coarse {
		return per, nil
	}
	read.Sources = []store.FlowSource{{Res: store.RollupMinute, From: w.From, To: w.To}}
	rows, err := s.reads.ReadFlowEdges(ctx, read)
	if err != nil || rows.Len() == 0 {
		return per, err
	}
	mins := rows.Slice()
	at := map[store.FlowRowKey][]time.Time{}
	for _, m := range mins {
		at[m.Key()] = append(at[m.Key()], m.First)
	}
	out := mins
	for _, r := range per {
		if r.End.Sub(r.First) <= time.Minute {
			continue // mins holds every minute of the window
		}
		covered := false
		for _, t := range at[r.Key()] {
			covered = covered || (!t.Before(r.First) && t.Before(r.End))
		}
		if !covered {
			out = append(out, r)
		}
	}
	return out, nil
}

// fillRTT reads the RTT histograms of a page's edges and sets their
// percentiles: merging histograms costs most of a read, and only the page
// shows them.
func (s *Service) fillRTT(ctx context.Context, edges []*Edge, w Window) error {
	var keys []store.FlowRowKey
	for _, e := range edges {
		for _, h := range []*half{e.client, e.server} {
			if h != nil {
				keys = append(keys, h.rows...)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rtt, err := s.reads.ReadFlowRTT(ctx, store.FlowSources(w.From, w.To), keys)
	if err != nil {
		return err
	}
	for _, e := range edges {
		for _, h := range []*half{e.client, e.server} {
			if h == nil {
				continue
			}
			h.RTT = nil
			for _, k := range h.rows {
				for i, n := range rtt[k] {
					if h.RTT == nil {
						h.RTT = map[int32]uint64{}
					}
					h.RTT[i] += n
				}
			}
		}
		e.setRTT()
	}
	return nil
}

// keep applies a filter to an edge.
func keep(e *Edge, f Filter, g *Graph, nodes map[int32]store.FlowNode) bool {
	ends := []End{e.Client, e.Server}
	if len(f.Labels) > 0 {
		ok := false
		for _, id := range append(slices.Clone(e.nodes), e.clientNode, e.serverNode) {
			n, found := nodes[id]
			if !found {
				continue
			}
			all := true
			for k, v := range f.Labels {
				all = all && n.Labels[k] == v
			}
			ok = ok || all
		}
		if !ok {
			return false
		}
	}
	if f.Namespace != "" {
		ok := false
		for _, end := range ends {
			if end.Owner != nil && g.Owners[*end.Owner].Namespace == f.Namespace {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	if f.Vertex != "" {
		ok := false
		for _, end := range ends {
			if end.Owner != nil {
				ok = ok || *end.Owner == f.Vertex
			} else {
				ok = ok || end.Address == f.Vertex
			}
		}
		if !ok {
			return false
		}
	}
	if f.Owner != "" {
		needle := strings.ToLower(f.Owner)
		ok := false
		for _, end := range ends {
			hay := []string{end.Address}
			if end.Owner != nil {
				o := g.Owners[*end.Owner]
				hay = append(hay, o.Name, o.Workload, o.ID)
			}
			for _, h := range hay {
				ok = ok || strings.Contains(strings.ToLower(h), needle)
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// page filters, sorts and pages a graph.
// keyed is an edge with its sort key: comparing keys made once costs less
// than looking them up in each comparison.
type keyed struct {
	e *Edge
	k cursor
}

// firstOf returns the first limit of ks in order, and whether there were
// more. A page is 500 of up to 50,000 edges: a heap of the page's size sees
// most edges once, against its last, where sorting them all was a sixth of
// a map's first read (bench/flowmap).
func firstOf(ks iter.Seq[keyed], limit int) ([]keyed, bool) {
	top := topk.New(limit, func(a, b keyed) int { return compareKeys(a.k, b.k) }, nil)
	more := false
	for k := range ks {
		if _, left := top.Push(k); left {
			more = true
		}
	}
	return top.Sorted(), more
}

func page(g *Graph, q Query, nodes map[int32]store.FlowNode) Map {
	m := Map{From: q.From, To: q.To, Resolution: q.Resolution(), Owners: []Owner{}, Edges: []*Edge{}, Other: g.Other}
	pg, more := firstOf(func(yield func(keyed) bool) {
		for _, e := range g.Edges {
			if !keep(e, q.Filter, g, nodes) {
				continue
			}
			m.TotalEdges++
			k := keyed{e, sortKey(e, q.Sort)}
			if (q.Cursor == nil || compareKeys(k.k, *q.Cursor) > 0) && !yield(k) {
				return
			}
		}
	}, q.Limit)
	// Copies: the graph may be cached and shared, and fillRTT sets the
	// page's RTT.
	for _, x := range pg {
		cp := *x.e
		for _, h := range []**half{&cp.client, &cp.server} {
			if *h != nil {
				c := **h
				*h = &c
			}
		}
		m.Edges = append(m.Edges, &cp)
	}
	if more && len(pg) > 0 {
		c := pg[len(pg)-1].k.String()
		m.NextCursor = &c
	}
	seen := map[string]bool{}
	for _, e := range m.Edges {
		for _, end := range []End{e.Client, e.Server} {
			if end.Owner != nil && !seen[*end.Owner] {
				seen[*end.Owner] = true
				m.Owners = append(m.Owners, g.Owners[*end.Owner])
			}
		}
	}
	sort.Slice(m.Owners, func(i, j int) bool { return m.Owners[i].Key < m.Owners[j].Key })
	return m
}

// The built graph of a window is kept a few seconds: a page, the next
// page, another sort or filter of the same window read it once. Building
// a map of 50,000 edges reads every edge's rows and costs about half a
// second, a read from memory about 50 ms (bench/flowmap); the page asks
// for it again as an operator clicks.
const (
	cacheTTL      = 15 * time.Second
	cacheMaxEdges = 100_000 // over every graph kept
)

type cachedGraph struct {
	key   string
	at    time.Time
	g     *Graph
	nodes map[int32]store.FlowNode
}

// graphCache keeps the newest graphs, at most cacheMaxEdges edges in all.
type graphCache struct {
	mu      sync.Mutex
	entries []cachedGraph
}

// cacheKey is what a graph depends on: who asks (a customer's selector
// and what it may see), the tenant asked for, the window.
func cacheKey(p access.Principal, tenant *string, w Window) string {
	sel := make([]string, 0, len(p.Selector))
	for k, v := range p.Selector {
		sel = append(sel, k+"="+v)
	}
	sort.Strings(sel)
	t := "\x00all"
	if tenant != nil {
		t = *tenant
	}
	return fmt.Sprintf("%s\x00%q\x00%q\x00%d\x00%d\x00%d", p.Role, sel, t, w.From.UnixNano(), w.To.UnixNano(), w.Res)
}

func (c *graphCache) get(key string, now time.Time) (*Graph, map[int32]store.FlowNode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.key == key && now.Sub(e.at) < cacheTTL && !now.Before(e.at) {
			return e.g, e.nodes, true
		}
	}
	return nil, nil, false
}

func (c *graphCache) put(key string, g *Graph, nodes map[int32]store.FlowNode, now time.Time) {
	if len(g.Edges) > cacheMaxEdges {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := []cachedGraph{{key: key, at: now, g: g, nodes: nodes}}
	total := len(g.Edges)
	for _, e := range c.entries {
		if e.key == key || now.Sub(e.at) >= cacheTTL || total+len(e.g.Edges) > cacheMaxEdges {
			continue
		}
		total += len(e.g.Edges)
		kept = append(kept, e)
	}
	c.entries = kept
}

func isCustomer(r *http.Request) bool {
	return access.FromContext(r.Context()).Role == access.RoleCustomer
}

// ListFlows serves GET /flows.
func (s *Service) ListFlows(w http.ResponseWriter, r *http.Request) {
	customer := isCustomer(r)
	q, err := parseQuery(r, s.now(), !customer)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	key := cacheKey(access.FromContext(r.Context()), q.Tenant, q.Window)
	g, nodes, ok := s.cache.get(key, s.now())
	if !ok {
		var err error
		if g, nodes, err = s.graph(r.Context(), api.Scope(r), customer, q.Window, q.Tenant, false, endFilter{}); err != nil {
			httpjson.WriteError(w, r, fmt.Errorf("flow map: %w", err), s.log)
			return
		}
		s.cache.put(key, g, nodes, s.now())
	}
	m := page(g, q, nodes)
	if err := s.fillRTT(r.Context(), m.Edges, q.Window); err != nil {
		httpjson.WriteError(w, r, fmt.Errorf("flow map: %w", err), s.log)
		return
	}
	if q.CSV {
		writeCSV(w, m)
		return
	}
	httpjson.Write(w, http.StatusOK, m)
}

// CSVHeader is the CSV answer's header row.
var CSVHeader = []string{"client_owner", "client_label", "client_address", "server_owner", "server_label", "server_address", "server_port",
	"seen_by", "state", "explain", "opened", "failed", "closed", "retransmits", "resets_client_sent", "resets_client_received",
	"resets_server_sent", "resets_server_received", "drops_client", "drops_server", "bytes_client_to_server", "bytes_server_to_client",
	"rtt_p50_ms", "rtt_p99_ms"}

func writeCSV(w http.ResponseWriter, m Map) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="flows-%s.csv"`, m.To.UTC().Format("20060102T1504Z")))
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	num := func(v uint64) string { return strconv.FormatUint(v, 10) }
	ms := func(p *float64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'f', -1, 64)
	}
	for _, e := range m.Edges {
		port := ""
		if e.Server.Port != nil {
			port = strconv.Itoa(*e.Server.Port)
		}
		_ = cw.Write([]string{csvSafe(str(e.Client.Owner)), csvSafe(e.Client.Label), e.Client.Address, csvSafe(str(e.Server.Owner)),
			csvSafe(e.Server.Label), e.Server.Address, port, strings.Join(e.SeenBy, "+"), e.State, csvSafe(e.Explain),
			num(e.Opened), num(e.Failed), num(e.Closed), num(e.Retransmits), reasons(e.Resets.ClientSent), reasons(e.Resets.ClientReceived),
			reasons(e.Resets.ServerSent), reasons(e.Resets.ServerReceived), reasons(e.Drops.Client), reasons(e.Drops.Server),
			num(e.BytesC2S), num(e.BytesS2C), ms(e.RTTP50), ms(e.RTTP99)})
	}
	cw.Flush()
}

// reasons writes reason counts as reason:n;reason:n, by reason.
func reasons(m map[string]uint64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for i, k := range ks {
		ks[i] = k + ":" + strconv.FormatUint(m[k], 10)
	}
	return strings.Join(ks, ";")
}

// csvSafe keeps a spreadsheet from reading an agent-chosen name as a
// formula.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
