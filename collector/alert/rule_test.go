package alert

import (
	"strings"
	"testing"
	"time"
)

func TestAlertRuleValidate(t *testing.T) {
	node := func(mod func(*Rule)) Rule {
		r := RuleInput{Name: "ResetStorm", Metric: "tcp_reset", State: "crit", ForIntervals: 2, Severity: "critical"}.Rule()
		if mod != nil {
			mod(&r)
		}
		return r
	}
	group := func(mod func(*Rule)) Rule {
		r := RuleInput{Name: "AcmeWarn", Kind: KindGroup, State: "warn", ForSeconds: 60, Severity: "warning",
			Selector: map[string]string{"customer": "acme"}, MinPercent: 20, GroupBy: []string{"rack"}}.Rule()
		if mod != nil {
			mod(&r)
		}
		return r
	}
	cases := []struct {
		name string
		rule Rule
		want string // "" = valid
	}{
		{"node rule", node(nil), ""},
		{"every root", node(func(r *Rule) { r.Metric = "*" }), ""},
		{"every sent reason", node(func(r *Rule) { r.Metric = "tcp_reset/sent/*" }), ""},
		{"group rule", group(nil), ""},
		{"group by count", group(func(r *Rule) { r.MinPercent, r.MinNodes = 0, 3 }), ""},
		{"bad name", node(func(r *Rule) { r.Name = "reset storm" }), "name \"reset storm\""},
		{"bad metric", node(func(r *Rule) { r.Metric = "TCP Reset" }), "metric \"TCP Reset\" must be a metric id"},
		{"bad pattern", node(func(r *Rule) { r.Metric = "tcp_reset/[" }), "metric \"tcp_reset/[\""},
		{"bad state", node(func(r *Rule) { r.State = "critical" }), "state \"critical\" must be warn, crit or unknown"},
		{"no hold", node(func(r *Rule) { r.ForIntervals = 0 }), "give for_intervals"},
		{"two holds", node(func(r *Rule) { r.ForSeconds = 5 }), "not both"},
		{"negative hold", node(func(r *Rule) { r.ForIntervals = -1 }), "for_intervals -1 must be from 1"},
		{"huge hold", node(func(r *Rule) { r.ForIntervals, r.ForSeconds = 0, 1<<30 }), "for_seconds 1073741824 must be from 1"},
		{"bad severity", node(func(r *Rule) { r.Severity = "P1!" }), "severity \"P1!\""},
		{"bad selector key", node(func(r *Rule) { r.Selector = map[string]string{"Customer": "acme"} }), "selector label \"Customer\""},
		{"reserved label", node(func(r *Rule) { r.Labels = map[string]string{"node": "x"} }), "label \"node\" is set by the alert itself"},
		{"runbook not a URL", node(func(r *Rule) { r.RunbookURL = "wiki/resets" }), "runbook_url"},
		{"group fields on a node rule", node(func(r *Rule) { r.MinNodes = 2 }), "belong to group rules"},
		{"group without threshold", group(func(r *Rule) { r.MinPercent = 0 }), "needs min_nodes"},
		{"group with both", group(func(r *Rule) { r.MinNodes = 2 }), "not both"},
		{"percent above 100", group(func(r *Rule) { r.MinPercent = 150 }), "min_percent 150"},
		{"group by twice", group(func(r *Rule) { r.GroupBy = []string{"rack", "rack"} }), "names \"rack\" twice"},
		{"unknown kind", node(func(r *Rule) { r.Kind = "fleet" }), "kind \"fleet\" must be node, group or silent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.rule.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want valid", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate() = %v, want error containing %q", err, c.want)
			}
		})
	}
}

func TestAlertRuleValidateReportsEverythingAtOnce(t *testing.T) {
	r := RuleInput{Name: "1bad", State: "bogus", Severity: "X"}.Rule()
	err := r.Validate()
	for _, want := range []string{"name", "state", "for_intervals", "severity"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}

func TestAlertRuleMatching(t *testing.T) {
	cases := []struct {
		pattern, id string
		want        bool
	}{
		{"*", "tcp_reset", true},
		{"*", "tcp_reset/sent", false},
		{"tcp_reset", "tcp_reset", true},
		{"tcp_reset", "tcp_reset/sent", false},
		{"tcp_reset/sent/*", "tcp_reset/sent/no_socket", true},
		{"tcp_reset/*/no_socket", "tcp_reset/sent/no_socket", true},
		{"tcp_*", "tcp_reset", true},
		{"tcp_*", "latency", false},
	}
	for _, c := range cases {
		r := Rule{Metric: c.pattern}
		if got := r.matchesMetric(c.id); got != c.want {
			t.Errorf("pattern %q on %q = %v, want %v", c.pattern, c.id, got, c.want)
		}
	}
}

func TestAlertRuleHold(t *testing.T) {
	if got := (&Rule{ForIntervals: 2}).hold(10 * time.Second); got != 20*time.Second {
		t.Errorf("2 intervals of 10s = %s", got)
	}
	if got := (&Rule{ForSeconds: 90}).hold(10 * time.Second); got != 90*time.Second {
		t.Errorf("90 seconds = %s", got)
	}
}
