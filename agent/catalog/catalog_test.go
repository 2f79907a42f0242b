package catalog

import (
	"testing"

	"github.com/nbs-project/nbs/internal/schema"
)

// Every fixed metric of the catalogue, and every named child worth a note,
// has an id the collector accepts, in its branch, under a defined parent:
// otherwise the collector refuses the agent's hello.
func TestEveryCatalogueIDIsValid(t *testing.T) {
	for _, b := range Documented() {
		defined := map[string]bool{}
		for _, m := range b.Metrics {
			defined[m.ID] = true
		}
		for _, m := range append(b.Metrics, b.Notes...) {
			if err := schema.CheckID(m.ID); err != nil {
				t.Errorf("%s: %v", m.ID, err)
			}
			if r := schema.Root(m.ID); r != b.Root {
				t.Errorf("%s: root %s, in branch %s", m.ID, r, b.Root)
			}
			if p := m.Parent(); p != "" && !defined[p] {
				t.Errorf("%s: parent %s is not among branch %s's fixed metrics", m.ID, p, b.Root)
			}
		}
		if !defined[b.Root] {
			t.Errorf("branch %s does not define its root", b.Root)
		}
	}
}
