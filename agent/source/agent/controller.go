package agent

import (
	"fmt"
	"sort"
	"time"
)

// Controller decides when triggered sources are attached: while their
// branch is in trouble (and for Hold after), while an operator has the node
// expanded, never more than MaxOn at a stretch (then a rest of Hold), and
// never when the agent's BPF programs would take more than Budget of a CPU.
// It only decides; the caller attaches and detaches.
type Controller struct {
	Budget float64 // fraction of one CPU for every BPF program together
	Hold   time.Duration
	MaxOn  time.Duration

	items map[string]*item
}

type item struct {
	since     time.Time // attached since
	until     time.Time // wanted until
	restUntil time.Time // not to be attached before
	cost      float64   // fraction of a CPU last measured while attached; 0 unknown
}

// Input is one triggered source's situation this interval.
type Input struct {
	Name string
	// Trouble names what calls for the source ("latency/tx/qdisc_to_driver
	// is CRIT"); empty when nothing does.
	Trouble string
	On      bool    // attached now
	Cost    float64 // fraction of a CPU its programs used over the interval, its own work only
	// Always wants the source attached whenever the budget allows
	// (source.Standing), with no trouble, expand or MaxOn.
	Always bool
}

// Decision changes one source's attachment.
type Decision struct {
	Name   string
	On     bool
	Reason string
}

// Step takes this interval's situation and returns the attachments to
// change. total is the fraction of a CPU all BPF programs used over the
// interval; expandUntil is when an operator's expand request ends.
func (c *Controller) Step(now, expandUntil time.Time, total float64, in []Input) []Decision {
	if c.items == nil {
		c.items = map[string]*item{}
	}
	type cand struct {
		Input
		it     *item
		want   bool
		reason string
	}
	cands := make([]*cand, 0, len(in))
	var activeCost float64
	for _, x := range in {
		it := c.items[x.Name]
		if it == nil {
			it = &item{}
			c.items[x.Name] = it
		}
		if x.On {
			activeCost += x.Cost
			if x.Cost > 0 {
				it.cost = x.Cost
			}
		} else {
			it.since = time.Time{}
		}
		cd := &cand{Input: x, it: it}
		switch {
		case x.Always:
			cd.reason = "always on"
		case x.Trouble != "":
			if t := now.Add(c.Hold); t.After(it.until) {
				it.until = t
			}
			cd.reason = "triggered: " + x.Trouble
		case now.Before(expandUntil):
			cd.reason = "an operator expanded the node"
		default:
			cd.reason = fmt.Sprintf("no trouble for %s", c.Hold)
		}
		if now.Before(expandUntil) && expandUntil.After(it.until) {
			it.until = expandUntil
		}
		cd.want = x.Always || now.Before(it.until)
		if cd.want && now.Before(it.restUntil) {
			cd.want, cd.reason = false, fmt.Sprintf("resting until %s after %s", it.restUntil.Format(time.TimeOnly), cd.reason)
		}
		if cd.want && !x.Always && x.On && !it.since.IsZero() && now.Sub(it.since) >= c.MaxOn {
			cd.want, cd.reason = false, fmt.Sprintf("attached for --triggered.max %s; resting for %s", c.MaxOn, c.Hold)
			it.restUntil = now.Add(c.Hold)
		}
		cands = append(cands, cd)
	}

	// The budget: shed the most expensive attached sources while the total
	// is over it; attach a wanted one only if its last measured cost fits.
	// Sources that were never measured are attached and measured.
	base := total - activeCost // always-on programs
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Cost > cands[j].Cost })
	kept := activeCost
	for _, cd := range cands {
		if cd.On && cd.want && base+kept > c.Budget {
			cd.want = false
			cd.reason = OverBudget(base+kept, cd.Cost, c.Budget)
			cd.it.restUntil = now.Add(c.Hold)
		}
		if cd.On && !cd.want {
			kept -= cd.Cost
		}
	}
	// Cheapest first, so the budget covers as many as it can.
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].it.cost < cands[j].it.cost })
	for _, cd := range cands {
		if !cd.On && cd.want && base+kept+cd.it.cost > c.Budget {
			cd.want = false
			cd.reason = fmt.Sprintf("would be over budget, %.2g%% of a CPU with this source's %.2g%% when last attached vs %.3g%%",
				100*(base+kept+cd.it.cost), 100*cd.it.cost, 100*c.Budget)
		}
		if !cd.On && cd.want {
			kept += cd.it.cost
		}
	}

	var out []Decision
	for _, cd := range cands {
		if cd.want == cd.On {
			continue
		}
		if cd.want {
			cd.it.since = now
		}
		out = append(out, Decision{Name: cd.Name, On: cd.want, Reason: cd.reason})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ForgetCost forgets what source name cost when last measured: its
// sampling changed (source.Expandable), so the next attach or interval
// measures it afresh rather than judge it by what it cost before.
func (c *Controller) ForgetCost(name string) {
	if it := c.items[name]; it != nil {
		it.cost = 0
	}
}

// OverBudget is the reason a source is detached over the budget, as the
// node's tree and the expand API show it after "detached: ": the agent's
// BPF total (fractions of a CPU) against the budget, and the source's own
// share.
func OverBudget(total, source, budget float64) string {
	return fmt.Sprintf("over budget, %.2g%% of a CPU vs %.3g%% (this source %.2g%%)", 100*total, 100*budget, 100*source)
}
