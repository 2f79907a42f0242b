package alert

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/internal/schema"
)

// The routes to these handlers are in api.Routes.
var _ api.AlertHandlers = (*Service)(nil)

// ListRules serves GET /alert-rules.
func (s *Service) ListRules(w http.ResponseWriter, r *http.Request) {
	rules, err := s.repo.rules(r.Context())
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if rules == nil {
		rules = []Rule{}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"rules": rules})
}

func pathID(r *http.Request, what string) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return 0, errkind.Errorf(errkind.Invalid, "%s id %s is not a positive number", what, api.Quote(raw))
	}
	return id, nil
}

// GetRule serves GET /alert-rules/{id}.
func (s *Service) GetRule(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert rule")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	rule, err := s.repo.rule(r.Context(), id)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	httpjson.Write(w, http.StatusOK, rule)
}

func decodeRule(r *http.Request) (Rule, error) {
	var in RuleInput
	if err := httpjson.Decode(r, &in); err != nil {
		return Rule{}, err
	}
	rule := in.Rule()
	return rule, rule.Validate()
}

// CreateRule serves POST /alert-rules.
func (s *Service) CreateRule(w http.ResponseWriter, r *http.Request) {
	rule, err := decodeRule(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	stored, err := s.repo.createRule(r.Context(), rule)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.log.Info("alert rule created", "id", stored.ID, "name", stored.Name)
	s.rulesChanged(r)
	w.Header().Set("Location", fmt.Sprintf("/api/v1/alert-rules/%d", stored.ID))
	httpjson.Write(w, http.StatusCreated, stored)
}

// PutRule serves PUT /alert-rules/{id}: replaces the rule.
func (s *Service) PutRule(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert rule")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	rule, err := decodeRule(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	stored, err := s.repo.updateRule(r.Context(), id, rule)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.log.Info("alert rule updated", "id", stored.ID, "name", stored.Name, "enabled", stored.Enabled)
	s.rulesChanged(r)
	httpjson.Write(w, http.StatusOK, stored)
}

// DeleteRule serves DELETE /alert-rules/{id}.
func (s *Service) DeleteRule(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert rule")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	ok, err := s.repo.deleteRule(r.Context(), id)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if !ok {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.NotFound, "alert rule %d: not found", id), s.log)
		return
	}
	s.log.Info("alert rule deleted", "id", id)
	s.rulesChanged(r)
	w.WriteHeader(http.StatusNoContent)
}

// rulesChanged tells the leader, wherever it runs, to reload the rules; if
// the notification is lost it reloads within reloadEvery anyway.
func (s *Service) rulesChanged(r *http.Request) {
	if err := s.repo.notifyRulesChanged(r.Context()); err != nil {
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
	// AcknowledgedAt: someone is on it (by whom, and why, is staff's).
	AcknowledgedAt *time.Time `json:"acknowledged_at"`
	AcknowledgedBy string     `json:"acknowledged_by,omitempty"`
	AckComment     string     `json:"ack_comment,omitempty"`
	// SilencedUntil: notifications of this alert's identity are silenced
	// until then (by whom, and why, is staff's).
	SilencedUntil  *time.Time `json:"silenced_until"`
	SilencedBy     string     `json:"silenced_by,omitempty"`
	SilenceComment string     `json:"silence_comment,omitempty"`
}

// AlertDetail is one alert with its delivery status and, for staff, its
// delivery log.
type AlertDetail struct {
	AlertView
	// Delivery is the newest notification's outcome, for every viewer:
	// none (nothing queued: pending, or no receiver), pending, delivered,
	// failed. Where it went is staff's (Deliveries).
	Delivery   string     `json:"delivery"`
	Deliveries []Delivery `json:"deliveries"`
}

// storedView is an alert with what people did about it.
func (s *Service) storedView(si *storedInstance) AlertView {
	v := s.view(&si.Instance)
	v.AcknowledgedAt, v.AcknowledgedBy, v.AckComment = utc(si.AckAt), si.AckBy, si.AckComment
	v.SilencedUntil, v.SilencedBy, v.SilenceComment = utc(si.SilencedUntil), si.SilencedBy, si.SilenceComment
	return v
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
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
		end := inst.ResolvedAt
		if end.IsZero() {
			end = time.Now()
		}
		v.TreeURL = s.treeURL(inst.Node, target, inst.Since, end)
	} else {
		v.Metric = inst.Metric
		v.TreeURL = s.fleetURL()
	}
	return v
}

// What GET /alerts answers at most: a page, and the groups of the open
// alerts. A client pages on with next_cursor; the totals count everything.
const (
	defaultAlertLimit = 100
	maxAlertLimit     = 1000
	maxAlertGroups    = 200
)

// AlertList is the answer of GET /alerts.
type AlertList struct {
	Alerts []AlertView `json:"alerts"`
	// Total is how many alerts the filter selects; len(Alerts) < Total
	// says the list is cut.
	Total  int         `json:"total"`
	Totals AlertTotals `json:"totals"`
	Limit  int         `json:"limit"`
	// NextCursor continues the list after this page; absent on the last.
	NextCursor string `json:"next_cursor,omitempty"`
	// Groups (with ?groups=true) are the open alerts by rule and group
	// labels, worst first; GroupsTotal is how many there are.
	Groups      []AlertGroupView `json:"groups,omitzero"`
	GroupsTotal *int             `json:"groups_total,omitempty"`
	Evaluator   *Leader          `json:"evaluator,omitempty"`
}

// AlertGroupView is a group of open alerts as the API serves it.
type AlertGroupView struct {
	Rule    string            `json:"rule"`
	Group   map[string]string `json:"group,omitempty"`
	Count   int               `json:"count"`
	Firing  int               `json:"firing"`
	Pending int               `json:"pending"`
	First   AlertView         `json:"first"`
}

// ListAlerts serves a page of alerts: firing, then pending, worst severity
// first, then history; newest first within each.
//
//	?state=firing|pending|resolved|open|all (default all)  ?node=  ?rule=
//	?limit= (1-1000, default 100)  ?cursor= (next_cursor of the previous page)  ?groups=true|false
func (s *Service) ListAlerts(w http.ResponseWriter, r *http.Request) {
	f, groups, err := alertQuery(r)
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	ctx := r.Context()
	page, err := s.repo.listAlerts(ctx, f)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	totals, err := s.repo.alertTotals(ctx, f)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	out := AlertList{Alerts: make([]AlertView, 0, len(page.Alerts)), Totals: totals, Limit: f.Limit}
	for i := range page.Alerts {
		out.Alerts = append(out.Alerts, forViewer(s.storedView(&page.Alerts[i]), f.Viewer))
	}
	// The page and the totals are two reads: an alert opened between them
	// must not make the list look cut, nor one resolved make it look whole.
	out.Total = max(totals.of(f.State), len(out.Alerts))
	if page.Next != nil {
		out.NextCursor = page.Next.String()
	}
	if groups {
		gs, n, err := s.repo.alertGroups(ctx, f, maxAlertGroups)
		if err != nil {
			httpjson.WriteError(w, r, err, s.log)
			return
		}
		out.Groups, out.GroupsTotal = make([]AlertGroupView, 0, len(gs)), &n
		for i := range gs {
			g := &gs[i]
			out.Groups = append(out.Groups, AlertGroupView{Rule: g.Rule, Group: g.Group, Count: g.Count, Firing: g.Firing,
				Pending: g.Pending, First: forViewer(s.storedView(&g.First), f.Viewer)})
		}
	}
	// Which collector evaluates (its host, pid and internal URL) is staff's.
	if f.Viewer.SeesAll() {
		l, err := s.repo.leader(ctx)
		if err != nil {
			httpjson.WriteError(w, r, err, s.log)
			return
		}
		out.Evaluator = &l
	}
	httpjson.Write(w, http.StatusOK, out)
}

// alertQuery reads GET /alerts' parameters; a filter no node or rule could
// match is a mistake worth saying, not an empty list.
func alertQuery(r *http.Request) (alertFilter, bool, error) {
	q := r.URL.Query()
	f := alertFilter{State: q.Get("state"), Limit: defaultAlertLimit, Viewer: access.FromContext(r.Context())}
	switch f.State {
	case "", "all", "open", "firing", "pending", "resolved":
	default:
		return f, false, errkind.Errorf(errkind.Invalid, "state %s must be firing, pending, resolved, open or all", api.Quote(f.State))
	}
	if f.Node = q.Get("node"); f.Node != "" {
		n, err := schema.NormalizeNodeName(f.Node)
		if err != nil {
			return f, false, errkind.Errorf(errkind.Invalid, "node %s is not a node name", api.Quote(f.Node))
		}
		f.Node = n
	}
	if f.Rule = q.Get("rule"); f.Rule != "" && !ruleNameRE.MatchString(f.Rule) {
		return f, false, errkind.Errorf(errkind.Invalid, "rule %s is not an alert rule name", api.Quote(f.Rule))
	}
	if l := q.Get("limit"); l != "" {
		var err error
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > maxAlertLimit {
			return f, false, errkind.Errorf(errkind.Invalid, "limit %s must be an integer from 1 to %d", api.Quote(l), maxAlertLimit)
		}
	}
	if c := q.Get("cursor"); c != "" {
		cur, err := parseAlertCursor(c)
		if err != nil {
			return f, false, errkind.Errorf(errkind.Invalid, "cursor %s: %v", api.Quote(c), err)
		}
		f.After = &cur
	}
	groups := false
	switch g := q.Get("groups"); g {
	case "", "false":
	case "true":
		groups = true
	default:
		return f, false, errkind.Errorf(errkind.Invalid, "groups %s must be true or false", api.Quote(g))
	}
	return f, groups, nil
}

// staffAnnotations are annotations a customer does not see: where staff
// are told to look (an internal runbook) is not the customer's business.
var staffAnnotations = []string{"runbook_url"}

// forViewer strips from an alert what only staff may see. A customer sees
// no alert of a staff-only metric (visibleTo); one explained by a child it
// may not see (a process's or a namespace's owner child) names the child's
// nearest ancestor it may, in every field (api.View).
func forViewer(v AlertView, p access.Principal) AlertView {
	if p.SeesAll() {
		return v
	}
	scrub := func(s string) string { return s }
	if view := api.ViewFor(p); v.Child != "" && !view.Metric(v.Child) {
		child, shown := v.Child, view.Shown(v.Child)
		scrub = func(s string) string {
			s = strings.ReplaceAll(s, url.QueryEscape(child), url.QueryEscape(shown)) // in tree_url
			return strings.ReplaceAll(s, child, shown)
		}
		v.Child = shown
		v.Summary, v.Description, v.TreeURL = scrub(v.Summary), scrub(v.Description), scrub(v.TreeURL)
	}
	labels := make(map[string]string, len(v.Labels))
	for k, val := range v.Labels {
		labels[k] = scrub(val)
	}
	v.Labels = labels
	ann := make(map[string]string, len(v.Annotations))
	for k, val := range v.Annotations {
		if !slices.Contains(staffAnnotations, k) {
			ann[k] = scrub(val)
		}
	}
	v.Annotations = ann
	v.AcknowledgedBy, v.AckComment, v.SilencedBy, v.SilenceComment = "", "", "", ""
	return v
}

// GetAlert serves GET /alerts/{id}: the alert, its delivery status and,
// for staff, its delivery log.
func (s *Service) GetAlert(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alert")
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.writeAlert(w, r, id)
}

// visibleAlert is alert id if viewer may see it, else a NotFound error
// that does not tell the alert exists.
func (s *Service) visibleAlert(ctx context.Context, id int64, viewer access.Principal) (storedInstance, error) {
	inst, ok, err := s.repo.alertByID(ctx, id, viewer)
	if err == nil && !ok {
		err = errkind.Errorf(errkind.NotFound, "alert %d: not found", id)
	}
	return inst, err
}

func (s *Service) detail(ctx context.Context, id int64, viewer access.Principal) (AlertDetail, error) {
	inst, err := s.visibleAlert(ctx, id, viewer)
	if err != nil {
		return AlertDetail{}, err
	}
	v := AlertDetail{AlertView: forViewer(s.storedView(&inst), viewer)}
	deliveries, err := s.repo.deliveries(ctx, id)
	if err != nil {
		return AlertDetail{}, err
	}
	v.Delivery = deliveryStatus(deliveries)
	// Where and how staff are paged (receiver URLs, errors) is not a customer's.
	if viewer.SeesAll() {
		v.Deliveries = deliveries
	}
	if v.Deliveries == nil {
		v.Deliveries = []Delivery{}
	}
	return v, nil
}

// deliveryStatus sums up the newest event's notifications: delivered when
// every receiver took it, pending while any is still being tried, failed
// when one was given up; none when nothing was queued.
func deliveryStatus(ds []Delivery) string {
	if len(ds) == 0 {
		return "none"
	}
	newest := ds[len(ds)-1].Event
	status := "delivered"
	for _, d := range ds {
		if d.Event != newest {
			continue
		}
		switch d.Status {
		case "pending":
			return "pending"
		case "failed":
			status = "failed"
		}
	}
	return status
}
