package api

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// Counterpart is another node's evidence about the same flow as an event:
// the reset the peer sent for the reset this node received, the packet the
// peer dropped for the flow this node saw fail. Only nodes the caller sees
// are ever named.
type Counterpart struct {
	Node   string            `json:"node"`
	Time   time.Time         `json:"t"`
	Metric string            `json:"metric"`
	Fields map[string]string `json:"fields"`
}

const (
	// counterpartWindow is how far apart, on corrected clocks, two
	// nodes' evidence may be and still be the same exchange: a reset and
	// the packet that caused it are microseconds apart on the wire, the
	// rest is the agents' timestamps and the clock estimate's error.
	counterpartWindow = 2 * time.Second
	// counterpartSkew is the largest clock offset between two nodes the
	// join still corrects: the read spans it, then each candidate is
	// placed on the collector's clock by its own node's offset.
	counterpartSkew = 5 * time.Second
	// maxCounterparts per event keeps an answer to limit events bounded.
	maxCounterparts = 3
	// latencyFlows is stamped when the agent collects, up to one interval
	// after the retransmits it reports (agent/catalog.LatencyFlows).
	latencyFlows = "latency/flows"
)

// flowProbe is the lookup of one event's other side, and the times (on the
// collector's clock) a counterpart must fall between.
type flowProbe struct {
	store.FlowProbe
	lo, hi time.Time
}

// probeFor says which flow an event is about: it needs both endpoints, and
// loopback or unspecified ones name a flow inside one host, which another
// node's identical-looking flow is not.
func probeFor(e store.StoredEvent, offset time.Duration, interval time.Duration) (flowProbe, bool) {
	src, err1 := netip.ParseAddrPort(e.Fields["src"])
	dst, err2 := netip.ParseAddrPort(e.Fields["dst"])
	if err1 != nil || err2 != nil {
		return flowProbe{}, false
	}
	for _, a := range []netip.Addr{src.Addr(), dst.Addr()} {
		if a.IsLoopback() || a.IsUnspecified() {
			return flowProbe{}, false
		}
	}
	proto := e.Fields["protocol"]
	if proto == "" {
		proto = "tcp" // resets and flows carry no protocol: they are TCP
	}
	near := e.Time.Add(-offset)
	p := flowProbe{lo: near.Add(-counterpartWindow), hi: near.Add(counterpartWindow)}
	if e.Metric == latencyFlows || strings.HasPrefix(e.Metric, latencyFlows+"/") {
		p.lo = p.lo.Add(-interval)
	}
	p.FlowProbe = store.FlowProbe{Src: e.Fields["src"], Dst: e.Fields["dst"], Protocol: proto,
		From: p.lo.Add(-counterpartSkew), To: p.hi.Add(counterpartSkew), Near: near}
	return p, true
}

// clockOffset is how far a node's clock is ahead of the collector's, 0
// while it is unknown (no stream here).
func (a *API) clockOffset(node string) time.Duration {
	if c, ok := a.live.(Clocks); ok {
		if d, ok := c.ClockOffset(node); ok && d.Abs() <= counterpartSkew {
			return d
		}
	}
	return 0
}

// counterparts finds the other side of each event of node n, in scope.
func (a *API) counterparts(ctx context.Context, scope store.Scope, n store.Node, events []store.StoredEvent) ([][]Counterpart, error) {
	out := make([][]Counterpart, len(events))
	var probes []flowProbe
	var at []int
	own := a.clockOffset(n.Name)
	interval := time.Duration(n.IntervalMS) * time.Millisecond
	for i, e := range events {
		if p, ok := probeFor(e, own, interval); ok {
			probes, at = append(probes, p), append(at, i)
		}
	}
	if len(probes) == 0 {
		return out, nil
	}
	asks := make([]store.FlowProbe, len(probes))
	for i, p := range probes {
		asks[i] = p.FlowProbe
	}
	// A few spare candidates: some may fall outside the window once their
	// node's clock is corrected.
	found, err := a.q.Counterparts(ctx, scope, n.ID, a.counterpartLabel, asks, 2*maxCounterparts)
	if err != nil {
		return nil, err
	}
	for i, cs := range found {
		p := probes[i]
		for _, c := range cs {
			t := c.Time.Add(-a.clockOffset(c.Node))
			if t.Before(p.lo) || t.After(p.hi) || len(out[at[i]]) == maxCounterparts {
				continue
			}
			f := c.Fields
			if f == nil {
				f = map[string]string{}
			}
			out[at[i]] = append(out[at[i]], Counterpart{Node: c.Node, Time: c.Time.UTC(), Metric: c.Metric, Fields: f})
		}
	}
	return out, nil
}
