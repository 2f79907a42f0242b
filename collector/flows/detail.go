package flows

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
)

// Point is one bucket of an edge's series.
type Point struct {
	T           time.Time `json:"t"`
	Opened      uint64    `json:"opened"`
	Failed      uint64    `json:"failed"`
	Resets      uint64    `json:"resets"`
	Drops       uint64    `json:"drops"`
	Retransmits uint64    `json:"retransmits"`
	RTTP99      *float64  `json:"rtt_p99_ms"`
}

// TreeLink opens one end's node page at the window's end, on the metrics
// that explain the edge.
type TreeLink struct {
	End     string   `json:"end"`
	Node    string   `json:"node"`
	Path    string   `json:"path"`
	Metrics []string `json:"metrics"`
}

// EvidenceLink is the evidence API's query for one end's node and the
// window.
type EvidenceLink struct {
	End  string `json:"end"`
	Node string `json:"node"`
	Path string `json:"path"`
}

// Links are an edge's ways into both ends' trees and evidence.
type Links struct {
	Tree     []TreeLink     `json:"tree"`
	Evidence []EvidenceLink `json:"evidence"`
}

// Detail is the answer of GET /flows/edge.
type Detail struct {
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Resolution string    `json:"resolution"`
	Edge       *Edge     `json:"edge"`
	Owners     []Owner   `json:"owners"`
	Series     []Point   `json:"series"`
	Links      Links     `json:"links"`
}

// GetFlowEdge serves GET /flows/edge.
func (s *Service) GetFlowEdge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("key")
	if key == "" || len(key) > maxKey {
		httpjson.WriteError(w, r, invalid("key: give the key of an edge of GET /flows (at most %d bytes)", maxKey), s.log)
		return
	}
	client, server, _, err := parseKey(key)
	if err != nil {
		httpjson.WriteError(w, r, invalid("key: %s is not the key of an edge of GET /flows", api.Quote(key)), s.log)
		return
	}
	var ends endFilter
	for _, end := range []string{client, server} {
		if k, ok := strings.CutPrefix(end, "o:"); ok {
			if _, id, ok := strings.Cut(k, "|"); ok {
				ends.owners = append(ends.owners, id)
			}
		} else if a, ok := strings.CutPrefix(end, "a:"); ok {
			ends.addrs = append(ends.addrs, a)
		}
	}
	win, err := ParseDetailWindow(q, s.now())
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	customer := isCustomer(r)
	g, nodes, err := s.graph(r.Context(), api.Scope(r), customer, win, nil, true, ends)
	if err != nil {
		httpjson.WriteError(w, r, fmt.Errorf("flow edge: %w", err), s.log)
		return
	}
	var e *Edge
	for _, x := range g.Edges {
		if x.Key == key {
			e = x
		}
	}
	if e == nil {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.NotFound, "no flow edge with key %s between %s and %s: not found",
			api.Quote(key), win.From.Format(time.RFC3339), win.To.Format(time.RFC3339)), s.log)
		return
	}
	httpjson.Write(w, http.StatusOK, detailOf(e, g, nodes, win))
}

func detailOf(e *Edge, g *Graph, nodes map[int32]store.FlowNode, win Window) Detail {
	d := Detail{From: win.From, To: win.To, Resolution: win.Resolution(), Edge: e, Owners: []Owner{}, Series: []Point{}}
	for _, end := range []End{e.Client, e.Server} {
		if end.Owner != nil {
			d.Owners = append(d.Owners, g.Owners[*end.Owner])
		}
	}
	d.Series = seriesOf(e)
	at := win.To.UTC().Format(time.RFC3339)
	from := win.From.UTC().Format(time.RFC3339)
	for _, side := range []struct {
		name   string
		end    End
		h      *half
		sent   map[string]uint64
		recv   map[string]uint64
		drops  map[string]uint64
		retran bool
	}{
		{"client", e.Client, e.client, e.Resets.ClientSent, e.Resets.ClientReceived, e.Drops.Client, e.client != nil && e.client.Retransmits > 0},
		{"server", e.Server, e.server, e.Resets.ServerSent, e.Resets.ServerReceived, e.Drops.Server, e.server != nil && e.server.Retransmits > 0},
	} {
		if side.end.Owner == nil {
			continue // an address: no node of the caller's to open
		}
		o := g.Owners[*side.end.Owner]
		var metrics []string
		for _, r := range sortedKeys(side.sent) {
			metrics = append(metrics, "tcp_reset/sent/"+r)
		}
		for _, r := range sortedKeys(side.recv) {
			metrics = append(metrics, "tcp_reset/received/"+r)
		}
		for _, r := range sortedKeys(side.drops) {
			metrics = append(metrics, "drops/"+r)
		}
		if side.retran {
			metrics = append(metrics, "latency/retransmits")
		}
		if len(metrics) == 0 {
			metrics = []string{"latency"}
		}
		d.Links.Tree = append(d.Links.Tree, TreeLink{End: side.name, Node: o.Node, Metrics: metrics,
			Path: "/nodes/" + url.PathEscape(o.Node) + "?" + url.Values{"at": {at}}.Encode()})
		metric := "latency"
		switch {
		case len(side.sent)+len(side.recv) > 0:
			metric = "tcp_reset"
		case len(side.drops) > 0:
			metric = "drops"
		}
		d.Links.Evidence = append(d.Links.Evidence, EvidenceLink{End: side.name, Node: o.Node,
			Path: api.Prefix + "/nodes/" + url.PathEscape(o.Node) + "/events?" + url.Values{"metric": {metric}, "from": {from}, "to": {at}}.Encode()})
	}
	if d.Links.Tree == nil {
		d.Links.Tree = []TreeLink{}
	}
	if d.Links.Evidence == nil {
		d.Links.Evidence = []EvidenceLink{}
	}
	return d
}

// seriesOf is an edge's points, oldest first: each bucket's figures as
// finish computes the whole window's.
func seriesOf(e *Edge) []Point {
	ts := map[int64]bool{}
	for _, h := range []*half{e.client, e.server} {
		if h != nil {
			for t := range h.buckets {
				ts[t] = true
			}
		}
	}
	keys := make([]int64, 0, len(ts))
	for t := range ts {
		keys = append(keys, t)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	if len(keys) > maxSeries {
		keys = keys[len(keys)-maxSeries:]
	}
	out := make([]Point, 0, len(keys))
	for _, t := range keys {
		b := &Edge{}
		if e.client != nil && e.client.buckets[t] != nil {
			b.client = &half{FlowCounters: *e.client.buckets[t]}
		}
		if e.server != nil && e.server.buckets[t] != nil {
			b.server = &half{FlowCounters: *e.server.buckets[t]}
		}
		b.finish(time.Minute, nil)
		f := b.figures()
		out = append(out, Point{T: time.Unix(t, 0).UTC(), Opened: b.Opened, Failed: b.Failed,
			Resets: sum(f.ClientSent) + sum(f.ClientReceived) + sum(f.ServerSent) + sum(f.ServerReceived),
			Drops:  sum(f.ClientDrops) + sum(f.ServerDrops), Retransmits: b.Retransmits, RTTP99: b.RTTP99})
	}
	return out
}

func sortedKeys(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
