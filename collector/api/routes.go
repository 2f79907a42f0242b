package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
)

// Prefix is where the JSON API lives; route patterns are relative to it.
const Prefix = "/api/v1"

// maxBody bounds every request body under Prefix.
const maxBody = 1 << 20

// Access decides who may do what (collector/access.Access): Guard wraps
// every answer (security headers, Host allow-list, same-origin JSON
// mutations), Require enforces a route's role, Metrics guards /metrics.
type Access interface {
	Guard(http.Handler) http.Handler
	Require(role access.Role, scoped bool) func(http.Handler) http.Handler
	Metrics(http.Handler) http.Handler
}

var (
	_ Access         = (*access.Access)(nil)
	_ AccessHandlers = (*access.Access)(nil)
)

// Route is one entry of the route table.
type Route struct {
	Method  string
	Pattern string // below Prefix, in chi's syntax: /nodes/{node}/tree
	Handler http.HandlerFunc
	// Role is the least a caller must hold: public (anyone), customer
	// (anyone signed in), viewer, operator or admin. openapi.json states
	// it as x-nbs-role.
	Role access.Role
	// Scoped: the handler answers only about the nodes the caller sees
	// (Scope), so a customer may call it if it is a viewer route. A {node}
	// route looks its node up in the caller's scope; a list filters.
	Scoped bool
}

// NodeHandlers answer about nodes: the fleet, one node, its tree, series
// and evidence (API itself).
type NodeHandlers interface {
	ListNodes(http.ResponseWriter, *http.Request)
	ListFleet(http.ResponseWriter, *http.Request)
	GetNode(http.ResponseWriter, *http.Request)
	GetTree(http.ResponseWriter, *http.Request)
	GetSeries(http.ResponseWriter, *http.Request)
	GetSeriesBatch(http.ResponseWriter, *http.Request)
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
	Acknowledge(http.ResponseWriter, *http.Request)
	Unacknowledge(http.ResponseWriter, *http.Request)
	Silence(http.ResponseWriter, *http.Request)
	Unsilence(http.ResponseWriter, *http.Request)
}

// NodeIdentityHandlers answer about which credential may report as each
// node, and revoke, re-enroll or delete nodes (collector/nodeauth).
type NodeIdentityHandlers interface {
	ListIdentities(http.ResponseWriter, *http.Request)
	RevokeNode(http.ResponseWriter, *http.Request)
	ReenrollNode(http.ResponseWriter, *http.Request)
	DeleteNode(http.ResponseWriter, *http.Request)
	LabelNode(http.ResponseWriter, *http.Request)
	ListBootstrapTokenInfos(http.ResponseWriter, *http.Request)
	CreateBootstrapTokenHTTP(http.ResponseWriter, *http.Request)
	RevokeBootstrapTokenHTTP(http.ResponseWriter, *http.Request)
}

// ReportHandlers answer about customer reports and their saved
// definitions (collector/report).
type ReportHandlers interface {
	GetReport(http.ResponseWriter, *http.Request)
	ListDefinitions(http.ResponseWriter, *http.Request)
	CreateDefinition(http.ResponseWriter, *http.Request)
	GetDefinition(http.ResponseWriter, *http.Request)
	PutDefinition(http.ResponseWriter, *http.Request)
	DeleteDefinition(http.ResponseWriter, *http.Request)
}

// ExportHandlers serve the fleet's metric trees to Prometheus
// (collector/export).
type ExportHandlers interface {
	GetMetrics(http.ResponseWriter, *http.Request)
	GetStatus(http.ResponseWriter, *http.Request)
}

// FlowHandlers answer about the flow map: who talked to whom, and how
// each edge fared (collector/flows).
type FlowHandlers interface {
	ListFlows(http.ResponseWriter, *http.Request)
	GetFlowEdge(http.ResponseWriter, *http.Request)
}

// AccessHandlers answer about signing in and out, the caller itself, API
// tokens and the audit log (collector/access).
type AccessHandlers interface {
	HandleLogin(http.ResponseWriter, *http.Request)
	HandleLogout(http.ResponseWriter, *http.Request)
	HandleWhoAmI(http.ResponseWriter, *http.Request)
	HandleListTokens(http.ResponseWriter, *http.Request)
	HandleCreateToken(http.ResponseWriter, *http.Request)
	HandleRevokeToken(http.ResponseWriter, *http.Request)
	HandleAudit(http.ResponseWriter, *http.Request)
}

// Parts are what answers under Prefix. A nil part's routes are left out,
// so a test can serve the one part it tests; the collector has them all.
type Parts struct {
	Nodes      NodeHandlers
	NodeConfig NodeConfigHandlers
	Alerts     AlertHandlers
	Identities NodeIdentityHandlers
	Access     AccessHandlers
	Reports    ReportHandlers
	Export     ExportHandlers
	Flows      FlowHandlers
	// Admission, when set, admits the heavy reads (reports, series,
	// evidence) by caller; without it they are not limited.
	Admission Admission
}

// Routes is the route table: every route under Prefix, in one list, with
// who may call it. openapi.json describes exactly these
// (TestOpenAPIMatchesRouter), and the access test in collector/app calls
// each as every kind of caller.
//
// Customers read their own nodes, trees, series, evidence, effective
// thresholds and alerts, and the overrides that apply to their nodes; alert
// rules, the audit log, tokens and every change are staff's. Anyone may
// log in and out; whoami is everyone's who is signed in.
func Routes(p Parts) []Route {
	const (
		get, put, post, del     = http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete
		public, signedIn        = access.RolePublic, access.RoleCustomer
		viewer, operator, admin = access.RoleViewer, access.RoleOperator, access.RoleAdmin
		scoped, unscoped        = true, false
	)
	routes := []Route{
		{get, "/openapi.json", ServeOpenAPI, viewer, unscoped},
	}
	if n := p.Nodes; n != nil {
		routes = append(routes, []Route{
			{get, "/nodes", n.ListNodes, viewer, scoped},
			{get, "/fleet", n.ListFleet, viewer, scoped},
			{get, "/nodes/{node}", n.GetNode, viewer, scoped},
			{get, "/nodes/{node}/tree", n.GetTree, viewer, scoped},
			{get, "/nodes/{node}/series", n.GetSeries, viewer, scoped},
			{get, "/nodes/{node}/series/batch", n.GetSeriesBatch, viewer, scoped},
			{get, "/nodes/{node}/events", n.GetEvents, viewer, scoped},
		}...)
	}
	if c := p.NodeConfig; c != nil {
		routes = append(routes, []Route{
			{get, "/thresholds", c.ListOverrides, viewer, scoped},
			{put, "/thresholds", c.PutOverride, operator, unscoped},
			{del, "/thresholds/{id}", c.DeleteOverride, operator, unscoped},
			{get, "/nodes/{node}/thresholds", c.NodeThresholds, viewer, scoped},
			{post, "/nodes/{node}/expand", c.ExpandNode, operator, scoped},
		}...)
	}
	if a := p.Alerts; a != nil {
		routes = append(routes, []Route{
			{get, "/alert-rules", a.ListRules, viewer, unscoped},
			{post, "/alert-rules", a.CreateRule, operator, unscoped},
			{get, "/alert-rules/{id}", a.GetRule, viewer, unscoped},
			{put, "/alert-rules/{id}", a.PutRule, operator, unscoped},
			{del, "/alert-rules/{id}", a.DeleteRule, operator, unscoped},
			{get, "/alerts", a.ListAlerts, viewer, scoped},
			{get, "/alerts/{id}", a.GetAlert, viewer, scoped},
			{post, "/alerts/{id}/acknowledge", a.Acknowledge, operator, unscoped},
			{del, "/alerts/{id}/acknowledge", a.Unacknowledge, operator, unscoped},
			{post, "/alerts/{id}/silence", a.Silence, operator, unscoped},
			{del, "/alerts/{id}/silence", a.Unsilence, operator, unscoped},
		}...)
	}
	if i := p.Identities; i != nil {
		routes = append(routes, []Route{
			{get, "/node-identities", i.ListIdentities, admin, unscoped},
			{post, "/nodes/{node}/revoke", i.RevokeNode, admin, unscoped},
			{post, "/nodes/{node}/reenroll", i.ReenrollNode, admin, unscoped},
			{del, "/nodes/{node}", i.DeleteNode, admin, unscoped},
			{put, "/nodes/{node}/labels", i.LabelNode, admin, unscoped},
			{get, "/node-bootstrap-tokens", i.ListBootstrapTokenInfos, admin, unscoped},
			{post, "/node-bootstrap-tokens", i.CreateBootstrapTokenHTTP, admin, unscoped},
			{del, "/node-bootstrap-tokens/{name}", i.RevokeBootstrapTokenHTTP, admin, unscoped},
		}...)
	}
	if rp := p.Reports; rp != nil {
		routes = append(routes, []Route{
			{get, "/reports", rp.GetReport, viewer, scoped},
			{get, "/report-definitions", rp.ListDefinitions, viewer, scoped},
			{post, "/report-definitions", rp.CreateDefinition, operator, unscoped},
			{get, "/report-definitions/{id}", rp.GetDefinition, viewer, scoped},
			{put, "/report-definitions/{id}", rp.PutDefinition, operator, unscoped},
			{del, "/report-definitions/{id}", rp.DeleteDefinition, operator, unscoped},
		}...)
	}
	if e := p.Export; e != nil {
		routes = append(routes, []Route{
			{get, "/export/metrics", e.GetMetrics, viewer, scoped},
			{get, "/export/status", e.GetStatus, viewer, unscoped},
		}...)
	}
	if f := p.Flows; f != nil {
		routes = append(routes, []Route{
			{get, "/flows", f.ListFlows, viewer, scoped},
			{get, "/flows/edge", f.GetFlowEdge, viewer, scoped},
		}...)
	}
	if a := p.Access; a != nil {
		routes = append(routes, []Route{
			{post, "/login", a.HandleLogin, public, unscoped},
			{post, "/logout", a.HandleLogout, public, unscoped},
			{get, "/whoami", a.HandleWhoAmI, signedIn, unscoped},
			{get, "/tokens", a.HandleListTokens, admin, unscoped},
			{post, "/tokens", a.HandleCreateToken, admin, unscoped},
			{del, "/tokens/{id}", a.HandleRevokeToken, admin, unscoped},
			{get, "/audit", a.HandleAudit, viewer, unscoped},
		}...)
	}
	if p.Admission != nil {
		admitHeavy(routes, p.Admission)
	}
	return routes
}

// codeMethodNotAllowed answers a known path asked with the wrong method; it
// is about routing, so no domain error has that kind.
const codeMethodNotAllowed = "method_not_allowed"

// V1 serves routes below Prefix (mount it there): each route behind
// acc.Require with the table's role, answers never cached, bodies at most
// maxBody, an unknown path a JSON 404 and a known path with the wrong method
// a JSON 405 with Allow — except that a caller is told only of methods it
// may call, and a path with none is as unknown to it as any other.
func V1(routes []Route, acc Access) chi.Router {
	r := chi.NewRouter()
	r.Use(middleware.SetHeader("Cache-Control", "no-store"), limitBody(maxBody))
	for _, rt := range routes {
		// Who may call it first: to a caller who may not, a route is as
		// unknown with bad parameters as with good ones.
		r.With(acc.Require(rt.Role, rt.Scoped), checkParams).MethodFunc(rt.Method, rt.Pattern, rt.Handler)
	}
	notFound := func(w http.ResponseWriter, req *http.Request) {
		httpjson.WriteError(w, req, errkind.Errorf(errkind.NotFound, "no API route %s %s: not found", req.Method, clipPath(req.URL.Path)), nil)
	}
	r.NotFound(notFound)
	// Public, so a caller is known (or nobody) without being refused.
	r.MethodNotAllowed(acc.Require(access.RolePublic, false)(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		allow := allowed(r, routes, routePath(req), access.FromContext(req.Context()))
		if len(allow) == 0 {
			notFound(w, req)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httpjson.Write(w, http.StatusMethodNotAllowed, httpjson.ErrorBody{Error: httpjson.ErrorDetail{Code: codeMethodNotAllowed,
			Message: req.Method + " is not allowed on " + clipPath(req.URL.Path) + "; use " + strings.Join(allow, " or ")}})
	})).ServeHTTP)
	return r
}

// shown reports whether a route exists for p: to a customer, only the
// routes it may call do (collector/access answers the others 404).
func shown(p access.Principal, rt Route) bool {
	if p.Role != access.RoleCustomer {
		return true
	}
	return rt.Role == access.RolePublic || rt.Role == access.RoleCustomer || (rt.Role == access.RoleViewer && rt.Scoped)
}

// routePath is the request's path below where V1 is mounted.
func routePath(req *http.Request) string {
	if rctx := chi.RouteContext(req.Context()); rctx != nil && rctx.RoutePath != "" {
		return rctx.RoutePath
	}
	return req.URL.Path
}

// allowed lists the methods the table has for path that p may know of, in
// table order. chi knows the methods too, but tells only its own 405
// handler, and not by caller; each route is asked whether it is the one
// that matches, since another method's route may match the same path.
func allowed(mux *chi.Mux, routes []Route, path string, p access.Principal) []string {
	var out []string
	for _, rt := range routes {
		if shown(p, rt) && !slices.Contains(out, rt.Method) && mux.Find(chi.NewRouteContext(), rt.Method, path) == rt.Pattern {
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

// Scope is the caller's view of the fleet, for handlers of scoped routes:
// every node for staff, a customer's own nodes, none for nobody.
func Scope(r *http.Request) store.Scope { return access.FromContext(r.Context()) }
