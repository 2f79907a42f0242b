package catalog_test

import (
	"strings"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/internal/promfamily"
)

// Every metric of the catalogue has a Prometheus family of its own (not
// the generic nbs_tree_* ones), and the labels its placeholders fill: a new
// metric without a rule in internal/promfamily fails here, not in a user's
// dashboard.
func TestEveryMetricHasAPrometheusFamily(t *testing.T) {
	rules := promfamily.New()
	n := 0
	for _, br := range catalog.Documented() {
		for _, ms := range [][]catalog.Metric{br.Metrics, br.Children, br.Notes} {
			for _, m := range ms {
				n++
				match := rules.Lookup(m.ID, promfamily.Kind(m.Kind), m.Unit, m.Quantile)
				if strings.HasPrefix(match.Family.Name, "nbs_tree_") {
					t.Errorf("%s (%v): no family in internal/promfamily, exported as %s", m.ID, m.Kind, match.Family.Name)
					continue
				}
				for i, v := range match.Values {
					if strings.ContainsAny(v, "/") {
						t.Errorf("%s: label %s = %q holds a path", m.ID, match.Family.Labels[i], v)
					}
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d metrics documented", n)
	}
}
