package alert

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// Rule kinds.
const (
	KindNode  = "node"
	KindGroup = "group"
	// KindSilent pages for each node matching Selector that has sent no
	// report for the hold: stopped, disconnected, or cut off from every
	// collector. Its alerts are node alerts (kind node) with no metric.
	KindSilent = "silent"
)

// instanceKind is the kind of the alerts a rule of this kind opens.
func instanceKind(ruleKind string) string {
	if ruleKind == KindSilent {
		return KindNode
	}
	return ruleKind
}

// Rule says when to page. A node rule watches each node on its own: a metric
// (an exact id, or a glob where * stands for one path segment, so "*" is
// every root) at or above State for the hold. A group rule counts the nodes
// matching Selector (optionally per value of GroupBy labels) whose metrics
// are at or above State, and pages when at least MinNodes of them, or
// MinPercent of them, are.
type Rule struct {
	ID           int64             `json:"id"`
	Name         string            `json:"name"`
	Kind         string            `json:"kind"`
	Metric       string            `json:"metric"`
	State        string            `json:"state"`
	ForIntervals int               `json:"for_intervals,omitempty"`
	ForSeconds   int               `json:"for_seconds,omitempty"`
	Severity     string            `json:"severity"`
	Selector     map[string]string `json:"selector"`
	MinNodes     int               `json:"min_nodes,omitempty"`
	MinPercent   float64           `json:"min_percent,omitempty"`
	GroupBy      []string          `json:"group_by,omitempty"`
	Labels       map[string]string `json:"labels"`
	RunbookURL   string            `json:"runbook_url,omitempty"`
	Enabled      bool              `json:"enabled"`
	Builtin      bool              `json:"builtin"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
}

// RuleInput is a rule as a user submits it: Enabled defaults to true.
type RuleInput struct {
	Name         string            `json:"name"`
	Kind         string            `json:"kind"`
	Metric       string            `json:"metric"`
	State        string            `json:"state"`
	ForIntervals int               `json:"for_intervals"`
	ForSeconds   int               `json:"for_seconds"`
	Severity     string            `json:"severity"`
	Selector     map[string]string `json:"selector"`
	MinNodes     int               `json:"min_nodes"`
	MinPercent   float64           `json:"min_percent"`
	GroupBy      []string          `json:"group_by"`
	Labels       map[string]string `json:"labels"`
	RunbookURL   string            `json:"runbook_url"`
	Enabled      *bool             `json:"enabled"`
}

// Rule turns the input into a rule (not yet validated).
func (in RuleInput) Rule() Rule {
	r := Rule{Name: in.Name, Kind: in.Kind, Metric: in.Metric, State: in.State, ForIntervals: in.ForIntervals,
		ForSeconds: in.ForSeconds, Severity: in.Severity, Selector: in.Selector, MinNodes: in.MinNodes,
		MinPercent: in.MinPercent, GroupBy: in.GroupBy, Labels: in.Labels, RunbookURL: in.RunbookURL, Enabled: true}
	if in.Enabled != nil {
		r.Enabled = *in.Enabled
	}
	if r.Kind == "" {
		r.Kind = KindNode
	}
	if r.Metric == "" {
		r.Metric = "*"
	}
	if r.Selector == nil {
		r.Selector = map[string]string{}
	}
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	return r
}

var (
	ruleNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	severityRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// reservedLabels are set by the alert itself; a rule's or node's label of
// the same name must not override them.
var reservedLabels = map[string]bool{"alertname": true, "severity": true, "node": true, "root": true, "metric": true}

// ErrInvalidRule marks a rule that cannot be stored as given.
var ErrInvalidRule = errkind.New(errkind.Invalid, "invalid alert rule")

const (
	maxForIntervals = 10_000
	maxForSeconds   = 7 * 24 * 3600
	maxGroupBy      = 5
	maxRuleLabels   = 16
	maxLabelValue   = 256
)

// Validate checks a rule as a user submitted it and says everything that is
// wrong at once.
func (r *Rule) Validate() error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if !ruleNameRE.MatchString(r.Name) {
		add("name %q must be 1-128 letters, digits or '_', not starting with a digit (it becomes the alertname label), e.g. TcpResetStorm", r.Name)
	}
	if !schema.ValidPattern(r.Metric) {
		add("metric %q must be a metric id like tcp_reset/sent/no_socket or a pattern where * matches one path segment (\"*\" = every root)", r.Metric)
	} else if _, err := path.Match(r.Metric, ""); err != nil {
		add("metric %q is not a valid pattern: %v", r.Metric, err)
	}
	if r.Kind == KindSilent && r.State == "" {
		r.State = "unknown" // a silent node's metrics are UNKNOWN; the state is not asked for
	}
	if _, ok := parseState(r.State); !ok {
		add("state %q must be warn, crit or unknown (the rule matches that state or worse)", r.State)
	}
	switch {
	case r.ForIntervals == 0 && r.ForSeconds == 0:
		add("give for_intervals (e.g. 2: two consecutive reports) or for_seconds (e.g. 60)")
	case r.ForIntervals != 0 && r.ForSeconds != 0:
		add("give for_intervals or for_seconds, not both")
	case r.ForIntervals < 0 || r.ForIntervals > maxForIntervals:
		add("for_intervals %d must be from 1 to %d", r.ForIntervals, maxForIntervals)
	case r.ForSeconds < 0 || r.ForSeconds > maxForSeconds:
		add("for_seconds %d must be from 1 to %d (7 days)", r.ForSeconds, maxForSeconds)
	}
	if !severityRE.MatchString(r.Severity) {
		add("severity %q must be a lower-case word such as critical, warning or info", r.Severity)
	}
	for k, v := range r.Selector {
		if !schema.ValidLabelKey(k) {
			add("selector label %q is not a valid label key (lower-case letters, digits, '_')", k)
		}
		if len(v) > maxLabelValue {
			add("selector label %s is longer than %d bytes", k, maxLabelValue)
		}
	}
	if len(r.Labels) > maxRuleLabels {
		add("labels: %d given, at most %d", len(r.Labels), maxRuleLabels)
	}
	for k, v := range r.Labels {
		switch {
		case !schema.ValidLabelKey(k):
			add("label %q is not a valid label key (lower-case letters, digits, '_')", k)
		case reservedLabels[k]:
			add("label %q is set by the alert itself; choose another name", k)
		}
		if len(v) > maxLabelValue {
			add("label %s is longer than %d bytes", k, maxLabelValue)
		}
	}
	if r.RunbookURL != "" {
		if u, err := url.Parse(r.RunbookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("runbook_url %q must be an absolute http(s) URL", r.RunbookURL)
		}
	}
	switch r.Kind {
	case KindNode:
		if r.MinNodes != 0 || r.MinPercent != 0 || len(r.GroupBy) > 0 {
			add("min_nodes, min_percent and group_by belong to group rules (kind group)")
		}
	case KindGroup:
		switch {
		case r.MinNodes == 0 && r.MinPercent == 0:
			add("a group rule needs min_nodes (e.g. 3) or min_percent (e.g. 20)")
		case r.MinNodes != 0 && r.MinPercent != 0:
			add("give min_nodes or min_percent, not both")
		case r.MinNodes < 0:
			add("min_nodes %d must be at least 1", r.MinNodes)
		case r.MinPercent < 0 || r.MinPercent > 100:
			add("min_percent %v must be above 0 and at most 100", r.MinPercent)
		}
		if len(r.GroupBy) > maxGroupBy {
			add("group_by: %d labels given, at most %d", len(r.GroupBy), maxGroupBy)
		}
		seen := map[string]bool{}
		for _, k := range r.GroupBy {
			if !schema.ValidLabelKey(k) {
				add("group_by label %q is not a valid label key", k)
			}
			if reservedLabels[k] {
				add("group_by label %q is set by the alert itself; choose another", k)
			}
			if seen[k] {
				add("group_by names %q twice", k)
			}
			seen[k] = true
		}
	case KindSilent:
		if r.MinNodes != 0 || r.MinPercent != 0 || len(r.GroupBy) > 0 {
			add("min_nodes, min_percent and group_by belong to group rules (kind group)")
		}
		if r.Metric != "*" {
			add("a silent rule watches whole nodes: metric must be \"*\" (or left out)")
		}
	default:
		add("kind %q must be node, group or silent", r.Kind)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidRule, strings.Join(errs, "; "))
	}
	return nil
}

func parseState(s string) (store.State, bool) {
	switch s {
	case "warn":
		return store.StateWarn, true
	case "crit":
		return store.StateCrit, true
	case "unknown":
		return store.StateUnknown, true
	}
	return store.StateUnspecified, false
}

// minState is the state the rule matches, or worse.
func (r *Rule) minState() store.State {
	s, _ := parseState(r.State)
	return s
}

// breaches reports whether a state is at or above the rule's.
func (r *Rule) breaches(s store.State) bool {
	return s.Severity() >= r.minState().Severity()
}

// matchesMetric reports whether a metric id is one the rule watches.
func (r *Rule) matchesMetric(id string) bool {
	if !strings.ContainsRune(r.Metric, '*') {
		return id == r.Metric
	}
	ok, _ := path.Match(r.Metric, id)
	return ok
}

// selects reports whether a node's labels match the rule's selector.
func (r *Rule) selects(labels map[string]string) bool {
	for k, v := range r.Selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// hold is how long the condition must last for the rule to fire, given the
// report interval of the node (or the longest of a group's).
func (r *Rule) hold(interval time.Duration) time.Duration {
	if r.ForSeconds > 0 {
		return time.Duration(r.ForSeconds) * time.Second
	}
	return time.Duration(r.ForIntervals) * interval
}

// forText renders the hold for people.
func (r *Rule) forText() string {
	if r.ForSeconds > 0 {
		return (time.Duration(r.ForSeconds) * time.Second).String()
	}
	if r.ForIntervals == 1 {
		return "1 interval"
	}
	return fmt.Sprintf("%d intervals", r.ForIntervals)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
