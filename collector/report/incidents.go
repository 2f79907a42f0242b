package report

// Incidents: spans of non-OK minutes of a root, with the child that
// explains each.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// incidents joins consecutive non-OK minutes of a root into spans; the
// child that explains one is the child non-OK the longest in it.
func incidents(bad []store.SampleRow, names map[int32]string, cur []store.SampleRow) []Incident {
	type key struct {
		node int32
		root string
	}
	byRoot := map[key][]store.SampleRow{}
	children := map[key][]store.SampleRow{}
	for _, r := range bad {
		root, _, isChild := strings.Cut(r.Path, "/")
		if isChild {
			children[key{r.NodeID, root}] = append(children[key{r.NodeID, root}], r)
		} else {
			byRoot[key{r.NodeID, root}] = append(byRoot[key{r.NodeID, root}], r)
		}
	}
	var out []Incident
	for k, rows := range byRoot {
		sort.Slice(rows, func(i, j int) bool { return rows[i].TS.Before(rows[j].TS) })
		var open *Incident
		var last time.Time
		flush := func() {
			if open == nil {
				return
			}
			open.End = last.Add(time.Minute)
			open.Seconds = open.End.Sub(open.Start).Seconds()
			open.Child = explain(children[k], open.Start, open.End)
			out = append(out, *open)
			open = nil
		}
		for _, r := range rows {
			if open != nil && r.TS.Sub(last) > time.Minute {
				flush()
			}
			if open == nil {
				open = &Incident{Node: names[k.node], Root: k.root, State: "warn", Start: r.TS,
					TreeURL: fmt.Sprintf("/nodes/%s?at=%d", names[k.node], r.TS.UnixMilli())}
				open.WorstValue = num(r.Max)
			}
			if r.Crit > 0 {
				open.State = "crit"
			}
			if open.WorstValue == nil || r.Max > *open.WorstValue {
				open.WorstValue = num(r.Max)
			}
			last = r.TS
		}
		flush()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Node+out[i].Root < out[j].Node+out[j].Root
	})
	if len(out) > maxIncidents {
		out = out[:maxIncidents]
	}
	return out
}

func explain(children []store.SampleRow, from, to time.Time) *string {
	bad := map[string]float64{}
	for _, c := range children {
		if !c.TS.Before(from) && c.TS.Before(to) {
			// CRIT seconds weigh more than WARN seconds.
			bad[c.Path] += c.Warn + 2*c.Crit
		}
	}
	var best string
	for p, v := range bad {
		if best == "" || v > bad[best] || (v == bad[best] && (len(p) > len(best) || (len(p) == len(best) && p < best))) {
			best = p
		}
	}
	if best == "" {
		return nil
	}
	return &best
}
