package api

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// TreeNode is one metric of a node's tree as the API serves it.
type TreeNode struct {
	ID          string           `json:"id"`
	Title       string           `json:"title"`
	Unit        string           `json:"unit"`
	Kind        string           `json:"kind"`
	Description string           `json:"description"`
	Value       *float64         `json:"value"`
	Count       *float64         `json:"count,omitempty"` // a rate's increase over the interval
	State       string           `json:"state"`
	OwnState    string           `json:"own_state"`
	UpdatedAt   *time.Time       `json:"updated_at,omitempty"`
	Threshold   *store.Threshold `json:"threshold"`
	// Over the recent window (the tree's ?window=, default 5m): a rate's
	// total increase, and the worst state any report carried.
	RecentCount *float64    `json:"recent_count,omitempty"`
	RecentState string      `json:"recent_state,omitempty"`
	Children    []*TreeNode `json:"children"`

	worst store.State
}

// BuildTree assembles the nested tree of a node from its definitions and
// newest values. The agent streams a child only when it is not OK or has a
// non-zero increase, so a child missing from the newest report is OK and, if
// it is a rate, zero.
func BuildTree(defs []store.MetricDef, latest store.Latest, thresholds map[string]*store.Threshold, recent map[string]store.Recent) []*TreeNode {
	byPath := make(map[string]*TreeNode, len(defs))
	roots := []*TreeNode{}
	newest := latest.Time.UnixMilli()
	for _, d := range defs { // sorted by path: parents first
		n := &TreeNode{ID: d.Path, Title: d.Title, Unit: d.Unit, Kind: d.Kind.String(), Description: d.Description,
			Threshold: d.DefaultThreshold, Children: []*TreeNode{}}
		if t, ok := thresholds[d.Path]; ok {
			n.Threshold = t
		}
		own := store.StateOK
		if v, ok := latest.Metrics[d.Path]; ok {
			at := time.UnixMilli(v.TimeMS).UTC()
			n.UpdatedAt = &at
			current := v.TimeMS >= newest
			switch {
			case current && (v.NoValue || (d.Kind == store.KindHistogram && v.Value == 0)):
				// No value: the agent had nothing to show, not 0. Agents
				// before no_value on histograms sent a quantile of 0 for an
				// interval without samples, which no recorded value gives.
				own = v.State
			case current:
				own = v.State
				n.Value = ptr(v.Value)
				if d.Kind == store.KindRate {
					n.Count = ptr(v.Value)
					n.Value = ptr(perSecond(v.Value, v.IntervalMS))
				}
			case d.Kind == store.KindRate:
				n.Value, n.Count = ptr(0.0), ptr(0.0)
			case !v.NoValue:
				n.Value = ptr(v.Value) // last known level; not streamed since, so it was OK
			}
		} else if d.Kind == store.KindRate && !latest.Time.IsZero() {
			n.Value, n.Count = ptr(0.0), ptr(0.0)
		}
		n.OwnState, n.worst = own.String(), own
		if recent != nil {
			rc := recent[d.Path]
			if d.Kind == store.KindRate {
				n.RecentCount = ptr(rc.Sum)
			}
			n.RecentState = store.Worse(store.StateOK, rc.Worst).String()
		}
		byPath[d.Path] = n
		if p := byPath[schema.Parent(d.Path)]; p != nil {
			p.Children = append(p.Children, n)
		} else {
			roots = append(roots, n)
		}
	}
	for _, r := range roots {
		propagate(r)
	}
	sortTree(roots, true)
	return roots
}

// agentRoot is the agent's own branch (its overhead and report backlog):
// the operator's concern, listed last and not shown to customers.
const agentRoot = "agent"

// sortTree orders siblings as they are read: raised first (CRIT, then
// WARN, then UNKNOWN), then OK, each by title with numbers in numeric
// order (sim-2 before sim-10); among roots the agent's own comes last, so
// its overhead never pushes a raised branch below the fold.
func sortTree(nodes []*TreeNode, roots bool) {
	slices.SortStableFunc(nodes, func(a, b *TreeNode) int {
		if roots && (a.ID == agentRoot) != (b.ID == agentRoot) {
			if a.ID == agentRoot {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(b.worst.Severity(), a.worst.Severity()); c != 0 {
			return c
		}
		return cmp.Or(NaturalCompare(a.Title, b.Title), NaturalCompare(a.ID, b.ID))
	})
	for _, n := range nodes {
		sortTree(n.Children, false)
	}
}

// NaturalCompare compares strings with runs of digits compared as numbers:
// "sim-2" < "sim-10".
func NaturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// propagate makes a parent's state the worst of its own and its children's,
// so a child over its threshold signals up to its root.
func propagate(n *TreeNode) store.State {
	for _, c := range n.Children {
		n.worst = store.Worse(n.worst, propagate(c))
	}
	n.State = n.worst.String()
	return n.worst
}

func perSecond(increase float64, intervalMS uint32) float64 {
	if intervalMS == 0 {
		return 0
	}
	return increase / (float64(intervalMS) / 1000)
}

func ptr[T any](v T) *T { return &v }
