package alert

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/api"
)

// Routes adds /alert-rules and /alerts under /api/v1.
func (s *Service) Routes(r chi.Router) {
	r.Get("/alert-rules", s.listRules)
	r.Post("/alert-rules", s.createRule)
	r.Get("/alert-rules/{id}", s.getRule)
	r.Put("/alert-rules/{id}", s.putRule)
	r.Delete("/alert-rules/{id}", s.deleteRule)
	r.Get("/alerts", s.listAlerts)
	r.Get("/alerts/{id}", s.getAlert)
}

func (s *Service) listRules(w http.ResponseWriter, r *http.Request) {
	rules, err := s.repo.rules(r.Context())
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	if rules == nil {
		rules = []Rule{}
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"rules": rules})
}

func pathID(r *http.Request, what string) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return 0, api.BadRequest("%s id %q is not a positive number", what, raw)
	}
	return id, nil
}

func (s *Service) getRule(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert rule")
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	rule, err := s.repo.rule(r.Context(), id)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	api.WriteJSON(w, http.StatusOK, rule)
}

func decodeRule(r *http.Request) (Rule, error) {
	var in RuleInput
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Rule{}, err
		}
		return Rule{}, api.BadRequest("request body: %v", err)
	}
	rule := in.Rule()
	if err := rule.Validate(); err != nil {
		return rule, api.BadRequest("%v", err)
	}
	return rule, nil
}

func (s *Service) createRule(w http.ResponseWriter, r *http.Request) {
	rule, err := decodeRule(r)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	stored, err := s.repo.createRule(r.Context(), rule)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	s.log.Info("alert rule created", "id", stored.ID, "name", stored.Name)
	s.rulesChanged(r)
	w.Header().Set("Location", fmt.Sprintf("/api/v1/alert-rules/%d", stored.ID))
	api.WriteJSON(w, http.StatusCreated, stored)
}

func (s *Service) putRule(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert rule")
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	rule, err := decodeRule(r)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	stored, err := s.repo.updateRule(r.Context(), id, rule)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	s.log.Info("alert rule updated", "id", stored.ID, "name", stored.Name, "enabled", stored.Enabled)
	s.rulesChanged(r)
	api.WriteJSON(w, http.StatusOK, stored)
}

func (s *Service) deleteRule(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert rule")
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	ok, err := s.repo.deleteRule(r.Context(), id)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	if !ok {
		api.WriteError(w, r, fmt.Errorf("alert rule %d: %w", id, api.ErrNotFound), s.log)
		return
	}
	s.log.Info("alert rule deleted", "id", id)
	s.rulesChanged(r)
	w.WriteHeader(http.StatusNoContent)
}

// rulesChanged tells the leader, wherever it runs, to reload the rules; if
// the notification is lost it reloads within reloadEvery anyway.
func (s *Service) rulesChanged(r *http.Request) {
	if _, err := s.repo.pool.Exec(r.Context(), `SELECT pg_notify($1, '')`, rulesChannel); err != nil {
		s.log.Warn("notify the alert leader of a rule change", "err", err)
	}
}

// AlertView is an alert as the API serves it.
type AlertView struct {
	ID          int64             `json:"id"`
	Fingerprint string            `json:"fingerprint"`
	RuleID      int64             `json:"rule_id"`
	Rule        string            `json:"rule"`
	Kind        string            `json:"kind"`
	Severity    string            `json:"severity"`
	State       string            `json:"state"`
	Node        string            `json:"node,omitempty"`
	Root        string            `json:"root,omitempty"`
	Metric      string            `json:"metric,omitempty"` // the metric the rule matched
	Child       string            `json:"child,omitempty"`  // the descendant that explains it
	Group       map[string]string `json:"group,omitempty"`
	Since       time.Time         `json:"since"`
	StartsAt    *time.Time        `json:"starts_at"`
	EndsAt      *time.Time        `json:"ends_at"`
	Value       *float64          `json:"value"`
	Summary     string            `json:"summary,omitempty"`
	Description string            `json:"description,omitempty"`
	TreeURL     string            `json:"tree_url"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// AlertDetail is one alert with its delivery log.
type AlertDetail struct {
	AlertView
	Deliveries []Delivery `json:"deliveries"`
}

func (s *Service) view(inst *Instance) AlertView {
	v := AlertView{ID: inst.ID, Fingerprint: inst.Fingerprint, RuleID: inst.RuleID, Rule: inst.RuleName, Kind: inst.Kind,
		Severity: inst.Severity, State: string(inst.State), Group: inst.Group, Since: inst.Since.UTC(), Value: inst.Headline,
		Summary: inst.Annotations["summary"], Description: inst.Annotations["description"],
		Labels: nonNil(inst.Labels), Annotations: nonNil(inst.Annotations)}
	if len(v.Group) == 0 {
		v.Group = nil
	}
	if !inst.FiredAt.IsZero() {
		t := inst.FiredAt.UTC()
		v.StartsAt = &t
	}
	if !inst.ResolvedAt.IsZero() {
		t := inst.ResolvedAt.UTC()
		v.EndsAt = &t
	}
	if inst.Kind == KindNode {
		v.Node, v.Root, v.Metric, v.Child = inst.Node, rootOf(inst.Metric), inst.Metric, inst.Child
		target := inst.Child
		if target == "" {
			target = inst.Metric
		}
		v.TreeURL = s.treeURL(inst.Node, target)
	} else {
		v.Metric = inst.Metric
		v.TreeURL = s.fleetURL()
	}
	return v
}

// listAlerts serves open alerts first, then history, newest first.
//
//	?state=firing|pending|resolved|open|all (default all)  ?node=  ?rule=  ?limit= (1-1000, default 100)
func (s *Service) listAlerts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	where := `WHERE true`
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	switch st := q.Get("state"); st {
	case "", "all":
	case "open":
		where += ` AND state <> 'resolved'`
	case "firing", "pending", "resolved":
		where += ` AND state = ` + arg(st)
	default:
		api.WriteError(w, r, api.BadRequest("state %q must be firing, pending, resolved, open or all", st), nil)
		return
	}
	if n := q.Get("node"); n != "" {
		where += ` AND node = ` + arg(n)
	}
	if n := q.Get("rule"); n != "" {
		where += ` AND rule_name = ` + arg(n)
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		var err error
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > 1000 {
			api.WriteError(w, r, api.BadRequest("limit %q must be an integer from 1 to 1000", l), nil)
			return
		}
	}
	insts, err := s.repo.instances(r.Context(), where+` ORDER BY state = 'resolved', id DESC LIMIT `+arg(limit), args...)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	leader, err := s.repo.leader(r.Context())
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	out := make([]AlertView, 0, len(insts))
	for i := range insts {
		out = append(out, s.view(&insts[i].Instance))
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"evaluator": leader, "alerts": out})
}

func (s *Service) getAlert(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert")
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	insts, err := s.repo.instances(r.Context(), `WHERE id = $1`, id)
	if err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	if len(insts) == 0 {
		api.WriteError(w, r, fmt.Errorf("alert %d: %w", id, api.ErrNotFound), s.log)
		return
	}
	v := AlertDetail{AlertView: s.view(&insts[0].Instance)}
	if v.Deliveries, err = s.repo.deliveries(r.Context(), id); err != nil {
		api.WriteError(w, r, err, s.log)
		return
	}
	if v.Deliveries == nil {
		v.Deliveries = []Delivery{}
	}
	api.WriteJSON(w, http.StatusOK, v)
}
