// Package sourcetest holds what the sources' tests share: the agent's way
// of turning cumulative counters into increases, and the kernel's own
// counters of a namespace as an oracle.
package sourcetest

import (
	"testing"

	"github.com/nbs-project/nbs/agent/netns"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/internal/schema"
)

// Ledger turns cumulative readings into increases as the agent's does: a
// counter seen first counts from 0, a retired one (and its subtree) is
// forgotten.
type Ledger struct {
	last map[string]uint64
	// Inc sums the increases of every reading added.
	Inc map[string]uint64
}

// NewLedger starts from a baseline reading's counters, as the agent
// starts from its first reading.
func NewLedger(base map[string]uint64) *Ledger {
	l := &Ledger{last: map[string]uint64{}, Inc: map[string]uint64{}}
	for id, v := range base {
		l.last[id] = v
	}
	return l
}

// Add takes one reading and returns its increases.
func (l *Ledger) Add(counters map[string]uint64, retired []string) map[string]uint64 {
	for _, r := range retired {
		for id := range l.last {
			if schema.Within(id, r) {
				delete(l.last, id)
			}
		}
	}
	inc := make(map[string]uint64, len(counters))
	for id, v := range counters {
		d := v - min(l.last[id], v)
		l.last[id] = v
		inc[id] = d
		l.Inc[id] += d
	}
	return inc
}

// Has says whether a counter is live (seen and not retired).
func (l *Ledger) Has(id string) bool {
	_, ok := l.last[id]
	return ok
}

// ChildSum sums the increases of parent's direct children in inc.
func ChildSum(inc map[string]uint64, parent string) (sum uint64, children int) {
	for id, v := range inc {
		if schema.Parent(id) == parent {
			sum += v
			children++
		}
	}
	return sum, children
}

// SNMP reads a namespace's /proc/net/snmp and snmp6 counters from inside
// it ("Tcp.OutRsts", "Udp.NoPorts"): the kernel's own, independent of any
// probe.
func SNMP(t testing.TB, h netns.Handle) map[string]uint64 {
	t.Helper()
	r := procnet.NewReader(h.ReadFile)
	c, err := r.SNMP()
	if err != nil {
		t.Fatal(err)
	}
	c6, err := r.SNMP6()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c6 {
		c[k] = v
	}
	return c
}
