package export

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
)

// Observer is told of every export (collector/telemetry).
type Observer interface {
	ObserveExport(kind string, series, nodes, overflowed int, took time.Duration)
}

// Handler serves the export for scraping: GET /api/v1/export/metrics.
type Handler struct {
	e   *Exporter
	obs Observer
}

func NewHandler(e *Exporter, obs Observer) *Handler { return &Handler{e: e, obs: obs} }

// GetMetrics answers in the Prometheus text format, or OpenMetrics when the
// scraper asks for it (Accept), gzip when it accepts it. The caller's
// scope decides which nodes: a customer's token its tenant's, staff's
// every node; ?match=label=value,… narrows either.
func (h *Handler) GetMetrics(w http.ResponseWriter, r *http.Request) {
	scope := store.Scope(access.FromContext(r.Context()))
	if m := r.URL.Query()["match"]; len(m) > 0 {
		if len(m) > 1 {
			httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, "match: give it once (label=value,… names several labels)"), nil)
			return
		}
		sel, err := access.ParseSelector(m[0])
		if err != nil {
			httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, "match: %v", err), nil)
			return
		}
		scope = Narrowed(scope, sel)
	}
	start := time.Now()
	snap, err := h.e.Gather(r.Context(), scope)
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	took := time.Since(start)
	h.e.Record("scrape", snap, took)
	if h.obs != nil {
		h.obs.ObserveExport("scrape", snap.Stats.Series, snap.Stats.Nodes, snap.Stats.Overflowed, took)
	}
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return snap.Families, nil })
	promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}).ServeHTTP(w, r)
}

// narrowed is a scope and a selector both: the nodes of scope whose labels
// also carry every label of sel.
type narrowed struct {
	store.Scope
	sel access.Selector
}

// Narrowed returns scope narrowed to the nodes sel matches.
func Narrowed(scope store.Scope, sel access.Selector) store.Scope {
	if len(sel) == 0 {
		return scope
	}
	return narrowed{scope, sel}
}

func (n narrowed) LabelClause(column string, argN int) (string, []any) {
	clause, args := n.Scope.LabelClause(column, argN)
	return "(" + clause + ") AND " + column + " @> $" + strconv.Itoa(argN+len(args)) + "::jsonb", append(args, n.sel.JSON())
}

func (n narrowed) Sees(labels map[string]string) bool {
	return n.Scope.Sees(labels) && n.sel.Matches(labels)
}

// SeesAll is the caller's: the export reads through LabelClause alone,
// and asks SeesAll only whether ping targets naming nodes the caller may
// not know must be hidden — staff know every node, matched or not.
func (n narrowed) SeesAll() bool { return n.Scope.SeesAll() }
