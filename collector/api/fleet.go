package api

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// What a client may ask of GET /fleet; past these it is a 400 that says so.
const (
	defaultFleetLimit = 100
	// maxFleetLimit bounds a page: a page's nodes are read with their
	// roots (and a raised node's newest values, to find what explains it).
	maxFleetLimit  = 500
	maxFleetOffset = 1_000_000
	maxFleetName   = 256 // bytes of ?q=
	maxFleetLabels = 16  // ?label= selectors
	maxFleetLabel  = 256 // bytes of one key=value
)

// FleetChild is the descendant that explains a raised root: following the
// worst child down while it is raised, as the node page opens.
type FleetChild struct {
	ID    string   `json:"id"`
	Title string   `json:"title"`
	Unit  string   `json:"unit"`
	Value *float64 `json:"value"`
	State string   `json:"state"`
}

// FleetRoot is one root of a node as the fleet page shows it.
type FleetRoot struct {
	ID    string   `json:"id"`
	Title string   `json:"title"`
	Unit  string   `json:"unit"`
	Kind  string   `json:"kind"`
	Value *float64 `json:"value"`
	State string   `json:"state"`
	// Since is when the root entered its state (the first report here that
	// carried it); null when not known.
	Since    *time.Time  `json:"since"`
	Explains *FleetChild `json:"explains"`
}

// FleetNode is one node of a fleet page: its summary, never its tree.
type FleetNode struct {
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Tenant    string            `json:"tenant"`
	State     string            `json:"state"`
	Since     *time.Time        `json:"since"`
	Connected bool              `json:"connected"`
	// Stale: no report for staleAfter intervals. Its state is unknown and
	// its roots are what it last reported, not current values.
	Stale      bool        `json:"stale"`
	LastReport *time.Time  `json:"last_report"`
	IntervalMS uint32      `json:"interval_ms"`
	RetiredAt  *time.Time  `json:"retired_at,omitempty"`
	Roots      []FleetRoot `json:"roots"`
}

// FleetCounts are the nodes by state.
type FleetCounts struct {
	OK      int `json:"ok"`
	Warn    int `json:"warn"`
	Crit    int `json:"crit"`
	Unknown int `json:"unknown"`
}

// Fleet is one page of the fleet.
type Fleet struct {
	Time time.Time `json:"time"`
	// Total nodes match the name and label filters, Counts splits them by
	// state; Matched of them also pass the state filter, and are paged.
	Total   int         `json:"total"`
	Counts  FleetCounts `json:"counts"`
	Matched int         `json:"matched"`
	Offset  int         `json:"offset"`
	Limit   int         `json:"limit"`
	Nodes   []FleetNode `json:"nodes"`
}

// parseFleet reads GET /fleet's parameters.
func parseFleet(q url.Values) (store.FleetQuery, error) {
	var f store.FleetQuery
	f.Name = strings.TrimSpace(q.Get("q"))
	if len(f.Name) > maxFleetName {
		return f, invalid("q %s is longer than %d bytes", Quote(f.Name), maxFleetName)
	}
	labels := q["label"]
	if len(labels) > maxFleetLabels {
		return f, invalid("at most %d label selectors, got %d", maxFleetLabels, len(labels))
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		switch {
		case len(l) > maxFleetLabel:
			return f, invalid("label %s is longer than %d bytes", Quote(l), maxFleetLabel)
		case !ok || k == "":
			return f, invalid("label %s must be key=value", Quote(l))
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	for _, s := range q["state"] {
		st, ok := map[string]store.State{"ok": store.StateOK, "warn": store.StateWarn, "crit": store.StateCrit, "unknown": store.StateUnknown}[s]
		if !ok {
			return f, invalid("state %s must be ok, warn, crit or unknown", Quote(s))
		}
		if !slices.Contains(f.States, st) {
			f.States = append(f.States, st)
		}
	}
	switch s := q.Get("sort"); s {
	case "", "state":
		f.Sort = store.FleetByState
	case "name":
		f.Sort = store.FleetByName
	case "last_seen":
		f.Sort = store.FleetByLastSeen
	default:
		return f, invalid("sort %s must be state, name or last_seen", Quote(s))
	}
	var err error
	if f.Offset, err = intParam(q.Get("offset"), "offset", 0, 0, maxFleetOffset); err != nil {
		return f, err
	}
	f.Limit, err = intParam(q.Get("limit"), "limit", defaultFleetLimit, 1, maxFleetLimit)
	return f, err
}

func intParam(s, name string, def, lo, hi int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, invalid("%s %s must be an integer from %d to %d", name, Quote(s), lo, hi)
	}
	return n, nil
}

// ListFleet serves GET /fleet: a page of the nodes the caller sees, with
// counts by state of all of them that match the filters.
func (a *API) ListFleet(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	fq, err := parseFleet(r.URL.Query())
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	now := a.now()
	fq.Now, fq.StaleAfter, fq.HideAgent = now, staleAfter, !staff(ctx)
	page, err := a.q.Fleet(ctx, Scope(r), fq)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	// Definitions of the page's roots and of what explains them.
	ids, paths := make([]int32, 0, len(page.Entries)), map[string]bool{}
	explains := map[int32]map[string]string{} // node → root → explaining path
	for _, e := range page.Entries {
		ids = append(ids, e.Node.ID)
		for p := range e.Roots {
			paths[p] = true
		}
		explains[e.Node.ID] = explainRoots(e)
		for _, p := range explains[e.Node.ID] {
			paths[p] = true
		}
	}
	// A customer's explaining child never names another tenant's node.
	explained := make([]string, 0, len(paths))
	for p := range paths {
		explained = append(explained, p)
	}
	hide, err := store.ForeignPing(ctx, a.q, Scope(r), explained)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	if hide != nil {
		for _, ex := range explains {
			maps.DeleteFunc(ex, func(_, p string) bool { return hide(p) })
		}
	}
	var defs map[string]store.MetricDef
	if len(ids) > 0 {
		pathList := make([]string, 0, len(paths))
		for p := range paths {
			pathList = append(pathList, p)
		}
		if defs, err = a.q.PathDefinitionsOf(ctx, ids, pathList); err != nil {
			httpjson.WriteError(w, r, err, a.log)
			return
		}
	}
	out := Fleet{Time: now.UTC(), Total: page.Total, Matched: page.Matched, Offset: fq.Offset, Limit: fq.Limit,
		Counts: FleetCounts{OK: page.Counts[store.StateOK], Warn: page.Counts[store.StateWarn],
			Crit: page.Counts[store.StateCrit], Unknown: page.Counts[store.StateUnknown]},
		Nodes: make([]FleetNode, 0, len(page.Entries))}
	for _, e := range page.Entries {
		n := fleetNode(e, defs, explains[e.Node.ID], a.live.Connected(e.Node.Name))
		if !staff(ctx) {
			// What a customer sees of a node (customer.go): not the
			// agent's own root, nor staff-only metrics explaining one.
			n.Roots = slices.DeleteFunc(n.Roots, func(r FleetRoot) bool { return StaffMetric(r.ID) })
			for i := range n.Roots {
				if e := n.Roots[i].Explains; e != nil && StaffMetric(e.ID) {
					n.Roots[i].Explains = nil
				}
			}
			n.Since = nodeSince(n, e)
		}
		out.Nodes = append(out.Nodes, n)
	}
	httpjson.Write(w, http.StatusOK, out)
}

// fleetNode is one node of the page: its roots (definitions by path in
// byPath) with their values, since when, and what explains a raised one.
func fleetNode(e store.FleetEntry, byPath map[string]store.MetricDef, explains map[string]string, connected bool) FleetNode {
	n := FleetNode{Name: e.Node.Name, Labels: e.Node.Labels, Tenant: e.Node.Tenant, State: e.State.String(),
		Connected: connected && e.Node.Retired == nil, Stale: e.Stale, IntervalMS: e.Node.IntervalMS, RetiredAt: e.Node.Retired,
		Roots: []FleetRoot{}}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if !e.Reported {
		return n
	}
	t := e.Time.UTC()
	n.LastReport = &t
	var rootDefs []store.MetricDef
	for p := range e.Roots {
		if d, ok := byPath[p]; ok {
			rootDefs = append(rootDefs, d)
		}
	}
	slices.SortFunc(rootDefs, func(a, b store.MetricDef) int { return strings.Compare(a.Path, b.Path) })
	l := store.Latest{Time: e.Time, IntervalMS: e.IntervalMS, Metrics: make(map[string]store.LatestValue, len(e.Roots))}
	for p, v := range e.Roots {
		l.Metrics[p] = v.LatestValue
	}
	for _, r := range BuildTree(rootDefs, l, nil, nil) {
		fr := FleetRoot{ID: r.ID, Title: r.Title, Unit: r.Unit, Kind: r.Kind, Value: r.Value, State: r.State}
		if s := e.Roots[r.ID].SinceMS; s != nil {
			fr.Since = ptr(time.UnixMilli(*s).UTC())
		}
		if p, ok := explains[r.ID]; ok {
			if d, ok := byPath[p]; ok {
				v := e.Raised[p]
				c := &FleetChild{ID: p, Title: d.Title, Unit: d.Unit, State: v.State.String()}
				if !v.NoValue {
					c.Value = ptr(v.Value)
					if d.Kind == store.KindRate {
						c.Value = ptr(perSecond(v.Value, v.IntervalMS))
					}
				}
				fr.Explains = c
			}
		}
		n.Roots = append(n.Roots, fr)
	}
	n.Since = nodeSince(n, e)
	return n
}

// nodeSince is since when the node has been in its state, where the
// roots tell: a stale node since it missed its reports; a raised one since
// the earliest of its roots in that state entered it; an OK one since the
// last of its roots became OK. Null when a root it depends on does not say.
func nodeSince(n FleetNode, e store.FleetEntry) *time.Time {
	if e.Stale {
		iv := time.Duration(max(e.IntervalMS, 1)) * time.Millisecond
		return ptr(e.Time.Add(staleAfter * iv).UTC())
	}
	var since *time.Time
	for _, r := range n.Roots {
		if r.State != n.State {
			continue
		}
		if r.Since == nil {
			return nil
		}
		if since == nil || (n.State == "ok" && r.Since.After(*since)) || (n.State != "ok" && r.Since.Before(*since)) {
			since = r.Since
		}
	}
	return since
}

// explainRoots finds, for every raised root of a node, its explaining
// descendant: the worst child in the newest report (the larger value among
// equals), followed down while it is not OK, as the node page opens. The
// agent streams only children that are not OK (or have an increase), and
// the store keeps those that are not OK (FleetEntry.Raised). A root with
// no such child explains itself: it has no entry.
func explainRoots(e store.FleetEntry) map[string]string {
	children := map[string][]string{}
	for p := range e.Raised {
		parent := schema.Parent(p)
		children[parent] = append(children[parent], p)
	}
	worse := func(a, b string) bool { // a explains more than b
		va, vb := e.Raised[a], e.Raised[b]
		if sa, sb := va.State.Severity(), vb.State.Severity(); sa != sb {
			return sa > sb
		}
		if va.Value != vb.Value {
			return va.Value > vb.Value
		}
		return a < b
	}
	out := map[string]string{}
	newest := e.Time.UnixMilli()
	for p, v := range e.Roots {
		if v.State == store.StateOK || v.TimeMS < newest {
			continue
		}
		at := p
		for {
			best := ""
			for _, c := range children[at] {
				if best == "" || worse(c, best) {
					best = c
				}
			}
			if best == "" {
				break
			}
			at = best
		}
		if at != p {
			out[p] = at
		}
	}
	return out
}
