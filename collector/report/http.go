package report

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
)

// Service serves the report routes (api.ReportHandlers).
type Service struct {
	st   Store
	defs repo
	log  *slog.Logger
	now  func() time.Time
}

var _ api.ReportHandlers = (*Service)(nil)

// New serves reports from st, with definitions in pool, under the
// default limits (SetLimits changes them).
func New(st Store, pool *pgxpool.Pool, log *slog.Logger) *Service {
	return &Service{st: st, defs: repo{pool: pool, limits: DefaultConfig()}, log: log, now: time.Now}
}

// SetLimits sets the limits on saved definitions (--reports.*); call it
// before serving.
func (s *Service) SetLimits(cfg Config) { s.defs.limits = cfg }

func invalid(format string, args ...any) error {
	return errkind.Errorf(errkind.Invalid, format, args...)
}

// query reads GET /reports's parameters into a Query.
func (s *Service) query(r *http.Request, now time.Time) (Query, error) {
	v := r.URL.Query()
	var q Query
	if id := v.Get("definition"); id != "" {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 1 {
			return q, invalid("definition %s is not a positive number", api.Quote(id))
		}
		d, err := s.defs.get(r.Context(), access.FromContext(r.Context()), n)
		if err != nil {
			return q, err
		}
		q.Selector, q.Targets, q.Objectives = d.Selector, d.Targets, d.Objectives
		q.From, q.To = d.span(now)
		if !q.From.Before(q.To) {
			return q, invalid("report definition %d: its %s has only just started; run it again in a minute", n, d.Period)
		}
		return q, nil
	}
	if sel := v.Get("selector"); sel != "" {
		if len(sel) > 1024 {
			return q, invalid("selector is longer than 1024 bytes")
		}
		parsed, err := access.ParseSelector(sel)
		if err != nil {
			return q, invalid("selector: %v", err)
		}
		q.Selector = parsed
	}
	q.To = now
	if t := v.Get("to"); t != "" {
		to, err := api.ParseTime(t)
		if err != nil {
			return q, invalid("to: %v", err)
		}
		// A little clock skew between browser and collector is not an error.
		if to.After(now.Add(time.Minute)) {
			return q, invalid("to (%s) is in the future", to.UTC().Format(time.RFC3339))
		}
		q.To = minTime(to, now)
	}
	q.From = q.To.Add(-7 * 24 * time.Hour)
	if f := v.Get("from"); f != "" {
		from, err := api.ParseTime(f)
		if err != nil {
			return q, invalid("from: %v", err)
		}
		q.From = from
	}
	if !q.From.Before(q.To) {
		return q, invalid("from (%s) must be before to (%s)", q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	}
	if q.To.Sub(q.From) > MaxPeriod {
		return q, invalid("period is longer than %d days", int(MaxPeriod.Hours()/24))
	}
	if t := v.Get("targets"); t != "" {
		if len(t) > 16<<10 {
			return q, invalid("targets is longer than 16 KiB")
		}
		q.Targets = strings.Split(t, ",")
		if err := validTargets(q.Targets); err != nil {
			return q, invalid("targets: %v", err)
		}
	}
	return q, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// wantsCSV: format=csv, or no format and an Accept that asks for CSV.
func wantsCSV(r *http.Request) (bool, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "csv":
		return true, nil
	case "json":
		return false, nil
	case "":
		return strings.Contains(r.Header.Get("Accept"), "text/csv"), nil
	default:
		return false, invalid("format %s must be json or csv", api.Quote(f))
	}
}

// GetReport serves GET /reports.
func (s *Service) GetReport(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	csv, err := wantsCSV(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	q, err := s.query(r, now)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	rep, err := Compute(r.Context(), s.st, q, now)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if !csv {
		httpjson.Write(w, http.StatusOK, rep)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="nbs-report-`+rep.Period.From.Format("20060102T1504Z")+`-`+rep.Period.To.Format("20060102T1504Z")+`.csv"`)
	w.WriteHeader(http.StatusOK)
	if err := WriteCSV(w, rep); err != nil {
		s.log.Warn("write report csv", "err", err)
	}
}

func pathID(r *http.Request) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return 0, invalid("report definition id %s is not a positive number", api.Quote(raw))
	}
	return id, nil
}

// DefinitionList is the answer to GET /report-definitions: a page, and
// the cursor of the next one while there is more.
type DefinitionList struct {
	Definitions []Definition `json:"definitions"`
	NextCursor  string       `json:"next_cursor,omitempty"`
}

// ListDefinitions serves GET /report-definitions?limit=&cursor=.
func (s *Service) ListDefinitions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := DefaultPage
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxPage {
			httpjson.WriteError(w, r, invalid("limit %s must be an integer from 1 to %d", api.Quote(l), MaxPage), s.log)
			return
		}
		limit = n
	}
	var after *Cursor
	if c := q.Get("cursor"); c != "" {
		cur, err := ParseCursor(c)
		if err != nil {
			httpjson.WriteError(w, r, err, s.log)
			return
		}
		after = &cur
	}
	p := access.FromContext(r.Context())
	page, err := s.defs.list(r.Context(), p, limit, after)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	out := DefinitionList{Definitions: make([]Definition, 0, len(page.Definitions))}
	for _, d := range page.Definitions {
		out.Definitions = append(out.Definitions, d.forViewer(p))
	}
	if page.Next != nil {
		out.NextCursor = page.Next.String()
	}
	httpjson.Write(w, http.StatusOK, out)
}

// GetDefinition serves GET /report-definitions/{id}.
func (s *Service) GetDefinition(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	d, err := s.defs.get(r.Context(), access.FromContext(r.Context()), id)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	httpjson.Write(w, http.StatusOK, d.forViewer(access.FromContext(r.Context())))
}

func decode(r *http.Request) (DefinitionInput, error) {
	var in DefinitionInput
	if err := httpjson.Decode(r, &in); err != nil {
		return in, err
	}
	return in, in.Validate()
}

// CreateDefinition serves POST /report-definitions.
func (s *Service) CreateDefinition(w http.ResponseWriter, r *http.Request) {
	in, err := decode(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	d, err := s.defs.create(r.Context(), access.FromContext(r.Context()), in)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	w.Header().Set("Location", "/api/v1/report-definitions/"+strconv.FormatInt(d.ID, 10))
	httpjson.Write(w, http.StatusCreated, d)
}

// PutDefinition serves PUT /report-definitions/{id}: replaces it.
func (s *Service) PutDefinition(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	in, err := decode(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	d, err := s.defs.update(r.Context(), id, in)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	httpjson.Write(w, http.StatusOK, d)
}

// DeleteDefinition serves DELETE /report-definitions/{id}.
func (s *Service) DeleteDefinition(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if err := s.defs.delete(r.Context(), id); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
