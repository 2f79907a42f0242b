package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/nbs-project/nbs/collector/errkind"
)

// Prefix is where the JSON API lives; route patterns are relative to it.
const Prefix = "/api/v1"

// maxBody bounds every request body under Prefix.
const maxBody = 1 << 20

// Role is the least a caller must be allowed for a route. Nothing checks it
// yet; it is in the table so that authentication can require it per route
// without a second list, and openapi.json states it (x-nbs-role).
type Role uint8

const (
	// RoleRead: look at nodes, trees, series, evidence, thresholds, alerts.
	RoleRead Role = iota + 1
	// RoleWrite: change thresholds or alert rules, expand a node's tree.
	RoleWrite
)

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	}
	return "none"
}

// Route is one entry of the route table.
type Route struct {
	Method  string
	Pattern string // below Prefix, in chi's syntax: /nodes/{node}/tree
	Handler http.HandlerFunc
	Role    Role
	// NodeScoped: the route is about the one node its {node} names, so a
	// caller allowed only some nodes can be checked before the handler
	// runs. Lists (/nodes, /alerts) are not: they would need filtering.
	NodeScoped bool
}

// NodeHandlers answer about nodes: the fleet, one node, its tree, series
// and evidence (API itself).
type NodeHandlers interface {
	ListNodes(http.ResponseWriter, *http.Request)
	GetNode(http.ResponseWriter, *http.Request)
	GetTree(http.ResponseWriter, *http.Request)
	GetSeries(http.ResponseWriter, *http.Request)
	GetEvents(http.ResponseWriter, *http.Request)
}

// NodeConfigHandlers answer about what is pushed to agents: threshold
// overrides and expand requests (collector/nodeconfig).
type NodeConfigHandlers interface {
	ListOverrides(http.ResponseWriter, *http.Request)
	PutOverride(http.ResponseWriter, *http.Request)
	DeleteOverride(http.ResponseWriter, *http.Request)
	NodeThresholds(http.ResponseWriter, *http.Request)
	ExpandNode(http.ResponseWriter, *http.Request)
}

// AlertHandlers answer about alert rules and alerts (collector/alert).
type AlertHandlers interface {
	ListRules(http.ResponseWriter, *http.Request)
	CreateRule(http.ResponseWriter, *http.Request)
	GetRule(http.ResponseWriter, *http.Request)
	PutRule(http.ResponseWriter, *http.Request)
	DeleteRule(http.ResponseWriter, *http.Request)
	ListAlerts(http.ResponseWriter, *http.Request)
	GetAlert(http.ResponseWriter, *http.Request)
}

// NodeIdentityHandlers answer about which credential may report as each
// node, and revoke, re-enroll or delete nodes (collector/nodeauth).
type NodeIdentityHandlers interface {
	ListIdentities(http.ResponseWriter, *http.Request)
	RevokeNode(http.ResponseWriter, *http.Request)
	ReenrollNode(http.ResponseWriter, *http.Request)
	DeleteNode(http.ResponseWriter, *http.Request)
}

// Parts are what answers under Prefix. A nil part's routes are left out,
// so a test can serve the one part it tests; the collector has them all.
type Parts struct {
	Nodes      NodeHandlers
	NodeConfig NodeConfigHandlers
	Alerts     AlertHandlers
	Identities NodeIdentityHandlers
}

// Routes is the route table: every route under Prefix, in one list.
// openapi.json describes exactly these (TestOpenAPIMatchesRouter).
func Routes(p Parts) []Route {
	const (
		get, put, post, del = http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete
		read, write         = RoleRead, RoleWrite
		node, fleet         = true, false
	)
	routes := []Route{
		{get, "/openapi.json", ServeOpenAPI, read, fleet},
	}
	if n := p.Nodes; n != nil {
		routes = append(routes, []Route{
			{get, "/nodes", n.ListNodes, read, fleet},
			{get, "/nodes/{node}", n.GetNode, read, node},
			{get, "/nodes/{node}/tree", n.GetTree, read, node},
			{get, "/nodes/{node}/series", n.GetSeries, read, node},
			{get, "/nodes/{node}/events", n.GetEvents, read, node},
		}...)
	}
	if c := p.NodeConfig; c != nil {
		routes = append(routes, []Route{
			{get, "/thresholds", c.ListOverrides, read, fleet},
			{put, "/thresholds", c.PutOverride, write, fleet},
			{del, "/thresholds/{id}", c.DeleteOverride, write, fleet},
			{get, "/nodes/{node}/thresholds", c.NodeThresholds, read, node},
			{post, "/nodes/{node}/expand", c.ExpandNode, write, node},
		}...)
	}
	if a := p.Alerts; a != nil {
		routes = append(routes, []Route{
			{get, "/alert-rules", a.ListRules, read, fleet},
			{post, "/alert-rules", a.CreateRule, write, fleet},
			{get, "/alert-rules/{id}", a.GetRule, read, fleet},
			{put, "/alert-rules/{id}", a.PutRule, write, fleet},
			{del, "/alert-rules/{id}", a.DeleteRule, write, fleet},
			{get, "/alerts", a.ListAlerts, read, fleet},
			{get, "/alerts/{id}", a.GetAlert, read, fleet},
		}...)
	}
	if i := p.Identities; i != nil {
		routes = append(routes, []Route{
			{get, "/node-identities", i.ListIdentities, read, fleet},
			{post, "/nodes/{node}/revoke", i.RevokeNode, write, node},
			{post, "/nodes/{node}/reenroll", i.ReenrollNode, write, node},
			{del, "/nodes/{node}", i.DeleteNode, write, node},
		}...)
	}
	return routes
}

// V1 serves routes below Prefix (mount it there): answers are never
// cached, bodies are at most maxBody, an unknown path is a JSON 404 and a
// known path with the wrong method a JSON 405 with Allow.
func V1(routes []Route) chi.Router {
	r := chi.NewRouter()
	r.Use(middleware.SetHeader("Cache-Control", "no-store"), limitBody(maxBody))
	for _, rt := range routes {
		r.MethodFunc(rt.Method, rt.Pattern, rt.Handler)
	}
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		WriteError(w, req, errkind.Errorf(errkind.NotFound, "no API route %s %s: not found", req.Method, clipPath(req.URL.Path)), nil)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allow := allowed(r, routes, routePath(req))
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteJSON(w, http.StatusMethodNotAllowed, ErrorBody{ErrorDetail{codeMethodNotAllowed,
			req.Method + " is not allowed on " + clipPath(req.URL.Path) + "; use " + strings.Join(allow, " or ")}})
	})
	return r
}

// routePath is the request's path below where V1 is mounted.
func routePath(req *http.Request) string {
	if rctx := chi.RouteContext(req.Context()); rctx != nil && rctx.RoutePath != "" {
		return rctx.RoutePath
	}
	return req.URL.Path
}

// allowed lists the methods the table has for path, in table order. chi
// knows them too, but tells only its own 405 handler.
func allowed(mux chi.Routes, routes []Route, path string) []string {
	var out []string
	for _, rt := range routes {
		if !slices.Contains(out, rt.Method) && mux.Match(chi.NewRouteContext(), rt.Method, path) {
			out = append(out, rt.Method)
		}
	}
	return out
}

func clipPath(p string) string {
	const n = 128
	if len(p) <= n {
		return p
	}
	return p[:n] + "…"
}

func limitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}
