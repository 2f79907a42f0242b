// Package api is the collector's HTTP side: the JSON API under /api/v1, the
// health endpoints, Prometheus /metrics and the embedded web UI.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// Live answers which nodes have a stream open on this collector.
type Live interface {
	Connected(node string) bool
}

// Thresholds resolves the thresholds in force for a node's metrics.
type Thresholds interface {
	Thresholds(ctx context.Context, n store.Node, defs []store.MetricDef) (map[string]*store.Threshold, error)
}

type API struct {
	store      *store.Store
	live       Live
	thresholds Thresholds
	log        *slog.Logger
	metrics    *telemetry.Metrics
	ui         http.Handler
	mounts     []func(chi.Router)
}

func New(st *store.Store, live Live, ui http.Handler, log *slog.Logger, m *telemetry.Metrics) *API {
	return &API{store: st, live: live, ui: ui, log: log, metrics: m}
}

// SetThresholds makes trees show effective thresholds instead of the
// catalogue defaults.
func (a *API) SetThresholds(t Thresholds) { a.thresholds = t }

// Mount lets other parts of the collector (thresholds, alerts, reports) add
// their routes under /api/v1 with the same middleware and error envelope.
func (a *API) Mount(f func(r chi.Router)) { a.mounts = append(a.mounts, f) }

// Handler returns the whole HTTP surface.
func (a *API) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.RequestID, middleware.RealIP, a.observe, middleware.Recoverer)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", a.ready)
	r.Handle("/metrics", a.metrics.Handler())
	r.Route("/api/v1", func(r chi.Router) {
		r.Use(middleware.SetHeader("Cache-Control", "no-store"))
		r.Use(limitBody(1 << 20))
		r.Get("/nodes", a.listNodes)
		r.Get("/nodes/{node}", a.getNode)
		r.Get("/nodes/{node}/tree", a.getTree)
		r.Get("/nodes/{node}/series", a.getSeries)
		r.Get("/nodes/{node}/events", a.getEvents)
		for _, m := range a.mounts {
			m(r)
		}
		r.NotFound(func(w http.ResponseWriter, r *http.Request) {
			WriteError(w, r, fmt.Errorf("no API route %s %s: %w", r.Method, r.URL.Path, ErrNotFound), nil)
		})
	})
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

func limitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}

func (a *API) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.store.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: errorDetail{Code: "unavailable", Message: "database: " + err.Error()}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// NodeSummary is a node as listed in the fleet view.
type NodeSummary struct {
	Name          string             `json:"name"`
	Labels        map[string]string  `json:"labels"`
	State         string             `json:"state"`
	Connected     bool               `json:"connected"`
	Stale         bool               `json:"stale"`
	LastReport    *time.Time         `json:"last_report"`
	IntervalMS    uint32             `json:"interval_ms"`
	AgentVersion  string             `json:"agent_version"`
	KernelRelease string             `json:"kernel_release"`
	Capabilities  []store.Capability `json:"capabilities"`
	Roots         []*TreeNode        `json:"roots"`
}

// staleAfter is how many missed intervals make a node's newest data stale.
const staleAfter = 3

func summarize(n store.Node, defs []store.MetricDef, latest store.Latest, ok, connected bool, now time.Time) NodeSummary {
	s := NodeSummary{Name: n.Name, Labels: n.Labels, Connected: connected, IntervalMS: n.IntervalMS,
		AgentVersion: n.AgentVersion, KernelRelease: n.KernelRelease, Capabilities: n.Capabilities, Roots: []*TreeNode{}}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if s.Capabilities == nil {
		s.Capabilities = []store.Capability{}
	}
	worst := store.StateUnknown
	if ok {
		t := latest.Time.UTC()
		s.LastReport = &t
		iv := time.Duration(max(latest.IntervalMS, 1)) * time.Millisecond
		s.Stale = now.Sub(latest.Time) > staleAfter*iv
		s.Roots = BuildTree(defs, latest, nil, nil)
		worst = store.StateOK
		for _, r := range s.Roots {
			r.Children = nil // the fleet view shows roots only
			worst = store.Worse(worst, r.worst)
		}
		if s.Stale {
			worst = store.StateUnknown
		}
	}
	s.State = worst.String()
	return s
}

func (a *API) listNodes(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	nodes, err := a.store.Nodes(ctx)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	roots, err := a.store.RootDefinitions(ctx)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	latest, err := a.store.LatestAll(ctx)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	now := time.Now()
	out := make([]NodeSummary, 0, len(nodes))
	for _, n := range nodes {
		l, ok := latest[n.ID]
		out = append(out, summarize(n, roots[n.ID], l, ok, a.live.Connected(n.Name), now))
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": out})
}

func (a *API) getNode(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	n, err := a.store.NodeByName(ctx, chi.URLParam(r, "node"))
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	defs, err := a.store.Definitions(ctx, n.ID)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	l, ok, err := a.store.Latest(ctx, n.ID)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	var rootDefs []store.MetricDef
	for _, d := range defs {
		if !containsSlash(d.Path) {
			rootDefs = append(rootDefs, d)
		}
	}
	writeJSON(w, http.StatusOK, summarize(n, rootDefs, l, ok, a.live.Connected(n.Name), time.Now()))
}

func containsSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}

func (a *API) getTree(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	n, err := a.store.NodeByName(ctx, chi.URLParam(r, "node"))
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	defs, err := a.store.Definitions(ctx, n.ID)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	l, ok, err := a.store.Latest(ctx, n.ID)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	var thresholds map[string]*store.Threshold
	if a.thresholds != nil {
		if thresholds, err = a.thresholds.Thresholds(ctx, n, defs); err != nil {
			WriteError(w, r, err, a.log)
			return
		}
	}
	window := 5 * time.Minute
	if ws := r.URL.Query().Get("window"); ws != "" {
		if window, err = time.ParseDuration(ws); err != nil || window < time.Second || window > 24*time.Hour {
			WriteError(w, r, badRequest("window %q must be a duration from 1s to 24h, e.g. 5m", ws), nil)
			return
		}
	}
	recent, err := a.store.RecentByMetric(ctx, n.ID, time.Now().Add(-window))
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	body := map[string]any{"node": n.Name, "time": nil, "interval_ms": n.IntervalMS, "window_s": int(window.Seconds()),
		"roots": BuildTree(defs, l, thresholds, recent)}
	if ok {
		body["time"] = l.Time.UTC()
	}
	writeJSON(w, http.StatusOK, body)
}

// maxPoints bounds a series response; longer ranges get coarser steps.
const maxPoints = 2000

// Point is one step of a series.
type Point struct {
	Time  time.Time `json:"t"`
	Value *float64  `json:"value"`
	Max   *float64  `json:"max,omitempty"`
	Count *float64  `json:"count,omitempty"`
	State string    `json:"state"`
	// Histograms: percentiles of the step's merged distribution, in unit.
	Percentiles *Percentiles `json:"percentiles,omitempty"`
}

type Percentiles struct {
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	Samples uint64  `json:"samples"`
}

func (a *API) getSeries(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	metric := q.Get("metric")
	if metric == "" {
		WriteError(w, r, badRequest("query parameter metric is required, e.g. metric=tcp_reset"), nil)
		return
	}
	from, to, err := timeRange(q.Get("from"), q.Get("to"), time.Hour)
	if err != nil {
		WriteError(w, r, err, nil)
		return
	}
	n, err := a.store.NodeByName(ctx, chi.URLParam(r, "node"))
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	defs, err := a.store.Definitions(ctx, n.ID)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	var def *store.MetricDef
	for i := range defs {
		if defs[i].Path == metric {
			def = &defs[i]
		}
	}
	if def == nil {
		WriteError(w, r, fmt.Errorf("metric %q on node %s: %w", metric, n.Name, ErrNotFound), nil)
		return
	}
	step := time.Duration(max(n.IntervalMS, 1)) * time.Millisecond
	if s := q.Get("step"); s != "" {
		if step, err = time.ParseDuration(s); err != nil || step <= 0 {
			WriteError(w, r, badRequest("step %q is not a positive duration like 10s or 5m", s), nil)
			return
		}
	}
	if minStep := to.Sub(from) / maxPoints; step < minStep {
		step = minStep.Round(time.Second) + time.Second
	}
	buckets, err := a.store.Series(ctx, n.ID, metric, from, to, step)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	points := make([]Point, 0, len(buckets))
	for _, b := range buckets {
		p := Point{Time: b.Start.UTC(), State: b.Worst.String()}
		switch def.Kind {
		case store.KindRate:
			p.Value = ptr(b.Sum / (float64(max(b.IntervalMS, 1)) / 1000))
			p.Count = ptr(b.Sum)
		default:
			if b.Present > 0 {
				p.Value, p.Max = ptr(b.Sum/float64(b.Present)), ptr(b.Max)
			}
		}
		if b.Present == 0 {
			p.State = store.StateOK.String()
		}
		points = append(points, p)
	}
	if def.Kind == store.KindHistogram {
		hs, err := a.store.HistogramSeries(ctx, n.ID, metric, from, to, step)
		if err != nil {
			WriteError(w, r, err, a.log)
			return
		}
		scale := max(def.Scale, 1)
		byStart := make(map[int64]*Percentiles, len(hs))
		for _, hb := range hs {
			h := hb.Hist
			byStart[hb.Start.UnixNano()] = &Percentiles{P50: h.Quantile(0.5) / scale, P90: h.Quantile(0.9) / scale,
				P99: h.Quantile(0.99) / scale, Max: h.Max() / scale, Samples: h.Count}
		}
		for i := range points {
			points[i].Percentiles = byStart[points[i].Time.UnixNano()]
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"node": n.Name, "metric": metric, "unit": def.Unit, "kind": def.Kind.String(),
		"from": from.UTC(), "to": to.UTC(), "step_ms": step.Milliseconds(), "points": points,
	})
}

func (a *API) getEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	metric := q.Get("metric")
	if metric == "" {
		WriteError(w, r, badRequest("query parameter metric is required, e.g. metric=tcp_reset"), nil)
		return
	}
	from, to, err := timeRange(q.Get("from"), q.Get("to"), time.Hour)
	if err != nil {
		WriteError(w, r, err, nil)
		return
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > 1000 {
			WriteError(w, r, badRequest("limit %q must be an integer from 1 to 1000", s), nil)
			return
		}
	}
	n, err := a.store.NodeByName(ctx, chi.URLParam(r, "node"))
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	events, err := a.store.Events(ctx, n.ID, metric, from, to, limit)
	if err != nil {
		WriteError(w, r, err, a.log)
		return
	}
	type event struct {
		Time   time.Time         `json:"t"`
		Metric string            `json:"metric"`
		Fields map[string]string `json:"fields"`
	}
	out := make([]event, 0, len(events))
	for _, e := range events {
		out = append(out, event{e.Time.UTC(), e.Metric, e.Fields})
	}
	writeJSON(w, http.StatusOK, map[string]any{"node": n.Name, "metric": metric, "events": out})
}

// timeRange parses from/to as RFC 3339 or Unix milliseconds; to defaults to
// now and from to `def` before to.
func timeRange(fromS, toS string, def time.Duration) (time.Time, time.Time, error) {
	to := time.Now()
	if toS != "" {
		t, err := parseTime(toS)
		if err != nil {
			return to, to, badRequest("to: %v", err)
		}
		to = t
	}
	from := to.Add(-def)
	if fromS != "" {
		t, err := parseTime(fromS)
		if err != nil {
			return from, to, badRequest("from: %v", err)
		}
		from = t
	}
	if !from.Before(to) {
		return from, to, badRequest("from (%s) must be before to (%s)", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	if to.Sub(from) > 400*24*time.Hour {
		return from, to, badRequest("range %s is longer than 400 days", to.Sub(from))
	}
	return from, to, nil
}

func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("%q is neither RFC 3339 (2026-01-02T15:04:05Z) nor Unix milliseconds", s)
	}
	return t, nil
}

// ErrNotFound and ErrBadRequest classify errors for WriteError, the one place
// that maps errors to HTTP status codes.
var (
	ErrNotFound   = store.ErrNotFound
	ErrBadRequest = errors.New("bad request")
	ErrConflict   = errors.New("conflict")
)

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// BadRequest builds a 400 error for other packages' handlers.
func BadRequest(format string, args ...any) error { return badRequest(format, args...) }

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteError writes the JSON error envelope. Server errors are logged and
// answered with a generic message, since they may carry internal detail.
func WriteError(w http.ResponseWriter, r *http.Request, err error, log *slog.Logger) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, errorBody{errorDetail{"not_found", err.Error()}})
	case errors.Is(err, ErrBadRequest):
		writeJSON(w, http.StatusBadRequest, errorBody{errorDetail{"bad_request", err.Error()}})
	case errors.Is(err, ErrConflict):
		writeJSON(w, http.StatusConflict, errorBody{errorDetail{"conflict", err.Error()}})
	case errors.As(err, &mbe):
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{errorDetail{"too_large", fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}})
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
	default:
		if log != nil {
			log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeJSON(w, http.StatusInternalServerError, errorBody{errorDetail{"internal", "internal error; the collector log has the details (request " + middleware.GetReqID(r.Context()) + ")"}})
	}
}

// WriteJSON writes v with the status code.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
