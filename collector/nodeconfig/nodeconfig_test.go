package nodeconfig

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

func TestValidate(t *testing.T) {
	thr := &store.Threshold{Warn: 1, Crit: 10, Comparison: "above", HoldIntervals: 1}
	cases := []struct {
		name string
		o    Override
		want string // "" = valid
	}{
		{"global", Override{Scope: Scope{Kind: "global"}, Metric: "tcp_reset", Threshold: thr}, ""},
		{"selector", Override{Scope: Scope{Kind: "selector", Selector: map[string]string{"customer": "acme"}}, Metric: "tcp_reset", Threshold: thr}, ""},
		{"node disabled", Override{Scope: Scope{Kind: "node", Node: "web-1"}, Metric: "tcp_reset/sent", Disabled: true}, ""},
		{"unknown scope", Override{Scope: Scope{Kind: "rack"}, Metric: "tcp_reset", Threshold: thr}, "must be global, selector or node"},
		{"empty selector", Override{Scope: Scope{Kind: "selector"}, Metric: "tcp_reset", Threshold: thr}, "at least one label"},
		{"node without name", Override{Scope: Scope{Kind: "node"}, Metric: "tcp_reset", Threshold: thr}, "needs a node name"},
		{"bad metric", Override{Scope: Scope{Kind: "global"}, Metric: "TCP Reset", Threshold: thr}, "not a metric id"},
		{"metric with an empty segment", Override{Scope: Scope{Kind: "global"}, Metric: "tcp_reset//sent", Threshold: thr}, `not a metric id like tcp_reset/sent/no_socket: empty segment`},
		{"bad node name", Override{Scope: Scope{Kind: "node", Node: "web 1"}, Metric: "tcp_reset", Threshold: thr}, `got "web 1": ' ' is not allowed`},
		{"bad selector key", Override{Scope: Scope{Kind: "selector", Selector: map[string]string{"Customer": "acme"}}, Metric: "tcp_reset", Threshold: thr}, `selector label "Customer" is not a valid label key: 'C' is not allowed`},
		{"NUL in selector value", Override{Scope: Scope{Kind: "selector", Selector: map[string]string{"customer": "a\x00"}}, Metric: "tcp_reset", Threshold: thr}, "selector label customer value: contains a NUL byte"},
		{"selector value too long", Override{Scope: Scope{Kind: "selector", Selector: map[string]string{"customer": strings.Repeat("a", 4097)}}, Metric: "tcp_reset", Threshold: thr}, "4097 bytes, at most 4096"},
		{"selector too large", Override{Scope: Scope{Kind: "selector", Selector: manyLabels(65)}, Metric: "tcp_reset", Threshold: thr}, "selector names 65 labels, but a node has at most 64"},
		{"no threshold", Override{Scope: Scope{Kind: "global"}, Metric: "tcp_reset"}, "threshold is required"},
		{"both", Override{Scope: Scope{Kind: "global"}, Metric: "tcp_reset", Threshold: thr, Disabled: true}, "either a threshold or disabled"},
		{"warn above crit", Override{Scope: Scope{Kind: "global"}, Metric: "tcp_reset", Threshold: &store.Threshold{Warn: 10, Crit: 1, Comparison: "above"}}, "must not be above crit"},
		{"bad comparison", Override{Scope: Scope{Kind: "global"}, Metric: "tcp_reset", Threshold: &store.Threshold{Warn: 1, Crit: 2, Comparison: "over"}}, "must be above or below"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.o.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want valid", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate() = %v, want error containing %q", err, c.want)
			}
		})
	}
}

func manyLabels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

func TestResolvePrefersTheMostSpecificScope(t *testing.T) {
	t0 := time.Now()
	mk := func(id int64, s Scope, warn float64, at time.Duration) Override {
		return Override{ID: id, Scope: s, Metric: "tcp_reset", Threshold: &store.Threshold{Warn: warn, Crit: 100, Comparison: "above"}, UpdatedAt: t0.Add(at)}
	}
	overrides := []Override{
		mk(1, Scope{Kind: "global"}, 1, 0),
		mk(2, Scope{Kind: "selector", Selector: map[string]string{"customer": "acme"}}, 2, 0),
		mk(3, Scope{Kind: "selector", Selector: map[string]string{"customer": "acme", "rack": "r1"}}, 3, 0),
		mk(4, Scope{Kind: "node", Node: "web-1"}, 4, 0),
		mk(5, Scope{Kind: "selector", Selector: map[string]string{"region": "eu"}}, 5, time.Second), // ties with 2 on specificity, newer
	}
	cases := []struct {
		node store.Node
		want int64
	}{
		{store.Node{Name: "other"}, 1},
		{store.Node{Name: "db-1", Labels: map[string]string{"customer": "acme"}}, 2},
		{store.Node{Name: "db-2", Labels: map[string]string{"customer": "acme", "rack": "r1"}}, 3},
		{store.Node{Name: "web-1", Labels: map[string]string{"customer": "acme", "rack": "r1"}}, 4},
		{store.Node{Name: "db-3", Labels: map[string]string{"customer": "acme", "region": "eu"}}, 5},
	}
	for _, c := range cases {
		got := Resolve(c.node, overrides)["tcp_reset"]
		if got == nil || got.ID != c.want {
			t.Errorf("node %s %v: override %+v, want id %d", c.node.Name, c.node.Labels, got, c.want)
		}
	}
}
