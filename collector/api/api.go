// Package api is the collector's HTTP side: the JSON API under /api/v1 (one
// route table, routes.go, described by openapi.json), the health endpoints,
// Prometheus /metrics and the embedded web UI. Answers and errors are
// written through collector/httpjson, the one place that turns an error's
// kind (collector/errkind) into an HTTP status.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// Queries is what the node routes and /readyz read from storage.
type Queries interface {
	Ping(ctx context.Context) error
	// The fleet and one node as a caller sees them: a node outside the
	// scope is not found, exactly like a node that does not exist.
	NodesIn(ctx context.Context, scope store.Scope) ([]store.Node, error)
	NodeByNameIn(ctx context.Context, scope store.Scope, name string) (store.Node, error)
	RootDefinitionsIn(ctx context.Context, scope store.Scope) (map[int32][]store.MetricDef, error)
	// The newest values of the roots only: the fleet view shows no more.
	LatestRootsIn(ctx context.Context, scope store.Scope) (map[int32]store.Latest, error)
	// A page of the fleet (GET /fleet): its nodes' summaries, and the
	// definitions of their roots and of what explains them.
	Fleet(ctx context.Context, scope store.Scope, q store.FleetQuery) (store.FleetPage, error)
	PathDefinitionsOf(ctx context.Context, ids []int32, paths []string) (map[string]store.MetricDef, error)
	// About one node, found through the calls above.
	Definitions(ctx context.Context, nodeID int32) ([]store.MetricDef, error)
	Latest(ctx context.Context, nodeID int32) (store.Latest, bool, error)
	RecentByMetric(ctx context.Context, nodeID int32, since time.Time) (map[string]store.Recent, error)
	Series(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]store.Bucket, error)
	HistogramSeries(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]store.HistogramBucket, error)
	// Series whose steps are whole minutes or hours are read from rollups.
	ReadRollups(ctx context.Context, q store.RollupQuery) ([]store.SampleRow, []store.HistogramRow, error)
	Events(ctx context.Context, nodeID int32, path string, from, to time.Time, limit int) ([]store.StoredEvent, error)
	// Other nodes' evidence about the same flows, from the nodes scope
	// sees only.
	Counterparts(ctx context.Context, scope store.Scope, except int32, space string, probes []store.FlowProbe, perProbe int) ([][]store.Counterpart, error)
}

var _ Queries = (*store.Store)(nil)

// Live answers which nodes have a stream open on this collector.
type Live interface {
	Connected(node string) bool
}

// Clocks, when Live has it too, tells how far a node's clock is ahead of
// the collector's while it has a stream open here.
type Clocks interface {
	ClockOffset(node string) (time.Duration, bool)
}

// Thresholds resolves the thresholds in force for a node's metrics.
type Thresholds interface {
	Thresholds(ctx context.Context, n store.Node, defs []store.MetricDef) (map[string]*store.Threshold, error)
}

// API serves the node routes itself and puts every route together.
type API struct {
	q          Queries
	live       Live
	thresholds Thresholds
	log        *slog.Logger
	metrics    *telemetry.Metrics
	ui         http.Handler
	now        func() time.Time
	// readyWarnings are listed by /readyz (SetReadyWarnings).
	readyWarnings []string
	// counterpartLabel narrows counterparts to one address space
	// (SetCounterpartLabel).
	counterpartLabel string
}

func New(q Queries, live Live, ui http.Handler, log *slog.Logger, m *telemetry.Metrics) *API {
	return &API{q: q, live: live, ui: ui, log: log, metrics: m, now: time.Now}
}

// SetThresholds makes trees show effective thresholds instead of the
// catalogue defaults.
func (a *API) SetThresholds(t Thresholds) { a.thresholds = t }

// SetCounterpartLabel makes counterparts match only between nodes whose
// value of label key k is the same (a node without it matches only others
// without it): two clusters of one tenant may reuse private addresses,
// and a look-alike flow in the other is not the same flow. "" leaves the
// tenant as the only bound.
func (a *API) SetCounterpartLabel(k string) { a.counterpartLabel = k }

// SetReadyWarnings makes /readyz list w: settings the collector runs with
// but that are unsafe (say, nodes that anyone may register), so a probe or
// an operator sees them long after the start-up log. Readiness stays 200:
// they are the operator's choice, not a failure.
func (a *API) SetReadyWarnings(w []string) { a.readyWarnings = w }

// Handler returns the whole HTTP surface behind acc.Guard: health (open, for
// probes), /metrics (acc.Metrics), the routes of the table under /api/v1
// (each behind acc.Require), and the UI for everything else (open: the
// login page is part of it, and it holds no data).
func (a *API) Handler(routes []Route, acc Access) chi.Router {
	r := chi.NewRouter()
	// No middleware.RealIP: it believes X-Forwarded-For from anyone.
	// acc.Guard finds the client's address, trusting the header only from
	// the proxies the operator names.
	r.Use(middleware.RequestID, a.observe, middleware.Recoverer, acc.Guard)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", a.ready)
	r.Handle("/metrics", acc.Metrics(a.metrics.Handler()))
	r.Mount(Prefix, V1(routes, acc))
	if a.ui != nil {
		r.Handle("/*", a.ui)
	}
	return r
}

func (a *API) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		start := time.Now()
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "other"
		}
		a.metrics.HTTPRequests.WithLabelValues(route, strconv.Itoa(ww.Status())).Inc()
		a.metrics.HTTPDurations.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

func (a *API) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.q.Ping(ctx); err != nil {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.Unavailable, "database: %w", err), nil)
		return
	}
	httpjson.Write(w, http.StatusOK, struct {
		Status   string   `json:"status"`
		Warnings []string `json:"warnings,omitempty"`
	}{"ready", a.readyWarnings})
}
