package ingest

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// PingGuard tells which of a node's ping targets name another tenant's
// node. The collector gives a node only peers of its own tenant; an agent
// may still name others: an old agent that kept the peers it was given
// before the operator bound or changed its tenant, an agent whose reports
// from before a move are resent after it, or a hostile one. What it names
// so is neither stored nor served: a customer must never see another
// customer's node names (DESIGN.md, "Identity, access and tenancy").
type PingGuard interface {
	// ForeignPingTargets returns the ids (ping/<name>) of the targets of
	// node naming a node of a tenant other than node's.
	ForeignPingTargets(ctx context.Context, node store.Node, targets []PingTarget) ([]string, error)
}

// PingTarget is one ping/<name> subtree a node defines.
type PingTarget struct {
	ID   string // ping/<name>
	Name string // the id's segment: the node name for a mesh peer
}

const pingRoot = "ping"

// pingTargetOf is the ping target whose subtree holds path: ping/<name>
// for ping/<name> and everything below it, but for ping/clock, which is
// the node's own clock.
func pingTargetOf(path string) (PingTarget, bool) {
	rest, ok := strings.CutPrefix(path, pingRoot+"/")
	name, _, _ := strings.Cut(rest, "/")
	if !ok || name == "" || name == "clock" {
		return PingTarget{}, false
	}
	return PingTarget{ID: pingRoot + "/" + name, Name: name}, true
}

// pingTargets collects the ping targets paths lie in, each once.
type pingTargets struct {
	list []PingTarget
	seen map[string]bool
}

// skip keeps target id out of what add collects.
func (p *pingTargets) skip(id string) {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	p.seen[id] = true
}

func (p *pingTargets) add(path string) {
	if t, ok := pingTargetOf(path); ok && !p.seen[t.ID] {
		p.skip(t.ID)
		p.list = append(p.list, t)
	}
}

// pingTargetsOf lists the ping target subtrees among defs.
func pingTargetsOf(defs []store.MetricDef) []PingTarget {
	var p pingTargets
	for _, d := range defs {
		p.add(d.Path)
	}
	return p.list
}

// within says whether path is in one of the subtrees ids.
func within(path string, ids []string) bool {
	for _, id := range ids {
		if schema.Within(path, id) {
			return true
		}
	}
	return false
}

// foreignTargets asks the guard about the ping targets among defs.
func (s *Server) foreignTargets(ctx context.Context, node store.Node, defs []store.MetricDef) ([]string, error) {
	if s.guard == nil {
		return nil, nil
	}
	targets := pingTargetsOf(defs)
	if len(targets) == 0 {
		return nil, nil
	}
	return s.guard.ForeignPingTargets(ctx, node, targets)
}

// withoutSubtrees is defs without the subtrees ids.
func withoutSubtrees(defs []store.MetricDef, ids []string) []store.MetricDef {
	out := make([]store.MetricDef, 0, len(defs))
	for _, d := range defs {
		if !within(d.Path, ids) {
			out = append(out, d)
		}
	}
	return out
}

// stripForeign removes from a report everything under the subtrees ids:
// definitions, samples, histograms and events. The rest of the report is
// stored as usual; it returns how many entries went.
//
// What goes is not deferred to a later report: it describes a node that
// is not this node's tenant's to see, and there is no report of this
// node's that another tenant reads. Its counts are dropped on purpose
// (docs/secure-deployment.md, "What crosses tenants: none").
func stripForeign(r *nbsv1.Report, ids []string) int {
	n := 0
	keep := func(path string) bool {
		if within(path, ids) {
			n++
			return false
		}
		return true
	}
	r.NewMetrics = filter(r.NewMetrics, func(d *nbsv1.MetricDefinition) bool { return keep(d.GetId()) })
	r.Samples = filter(r.Samples, func(x *nbsv1.Sample) bool { return keep(x.GetMetricId()) })
	r.Histograms = filter(r.Histograms, func(x *nbsv1.Histogram) bool { return keep(x.GetMetricId()) })
	r.Events = filter(r.Events, func(x *nbsv1.Event) bool { return keep(x.GetMetricId()) })
	return n
}

func filter[T any](xs []T, keep func(T) bool) []T {
	out := xs[:0]
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// refuseForeign logs and counts ping targets left out of what a node
// reported: the collector's log is staff's, and says which.
func (s *Server) refuseForeign(node store.Node, ids []string, in string) {
	s.metrics.Rejects.WithLabelValues("foreign_ping_target").Add(float64(len(ids)))
	s.log.Warn("ping targets naming nodes of another tenant are neither stored nor served", "node", node.Name, "tenant", node.Tenant,
		"in", in, "targets", ids)
}

// guardReport checks the ping targets a report defines and strips what
// it says of any naming another tenant's node, before it is validated.
//
// After a Config push (the fleet's peers changed: a peer may have moved
// to another tenant, or back) the targets the stream has defined are
// checked again too: an agent that does not forget a peer the collector
// took away (an older version) reports nothing more of it once it is
// another tenant's. A target refused before it was defined stays refused
// for the stream: its definition was never stored.
func (s *Server) guardReport(ctx context.Context, st *stream, r *nbsv1.Report) error {
	recheck := st.recheckPing.Swap(false)
	if s.guard == nil || (len(r.GetNewMetrics()) == 0 && !recheck) {
		if ids := st.foreignIDs(); len(ids) > 0 {
			stripForeign(r, ids)
		}
		return nil
	}
	var targets pingTargets
	// What stays refused whatever the check says: refused at the Hello
	// or in a report's new_metrics, so never defined on this stream.
	var keep []string
	for _, id := range st.foreignIDs() {
		if recheck && st.metrics.has(id) {
			targets.add(id)
		} else {
			keep = append(keep, id)
			targets.skip(id)
		}
	}
	for _, d := range r.GetNewMetrics() {
		targets.add(d.GetId())
	}
	if recheck {
		for id := range st.metrics.base {
			targets.add(id)
		}
		for id := range st.metrics.extra {
			targets.add(id)
		}
	}
	if len(targets.list) > 0 {
		foreign, err := s.guard.ForeignPingTargets(ctx, st.node, targets.list)
		if err != nil {
			s.log.Error("check ping targets", "node", st.node.Name, "err", err)
			return status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
		}
		var fresh []string
		for _, id := range foreign {
			if !slices.Contains(st.foreignIDs(), id) {
				fresh = append(fresh, id)
			}
		}
		if len(fresh) > 0 {
			s.refuseForeign(st.node, fresh, "report")
		}
		keep = append(keep, foreign...)
	}
	st.setForeign(keep)
	if len(keep) > 0 {
		stripForeign(r, keep)
	}
	return nil
}

// streamTenancy is what the tenancy checks keep of a stream.
type streamTenancy struct {
	// foreign are the ping targets naming another tenant's node
	// (PingGuard): nothing under them is stored.
	foreign []string
	// former is the row the node's name had before its latest move, read
	// once the stream resends a report from before it began (looked).
	former store.FormerRow
	looked bool
}

func (st *stream) foreignIDs() []string {
	if st.tenancy == nil {
		return nil
	}
	return st.tenancy.foreign
}

func (st *stream) setForeign(ids []string) {
	if st.tenancy == nil {
		if len(ids) == 0 {
			return
		}
		st.tenancy = &streamTenancy{}
	}
	st.tenancy.foreign = ids
}

// FormerRows finds the row a node's name had before its latest move
// (store.FormerRow).
type FormerRows interface {
	FormerRow(ctx context.Context, name string, current int32) (store.FormerRow, error)
}

// destination is the row a report is stored in: the stream's node's,
// but for a report from before the node's latest move (an agent resends
// what was not acked when the move ended its stream), which is stored in
// the row of the tenant the node had then. So what a node measured while
// it was acme's stays acme's — its evidence (acme's flows) included —
// and is not lost either. What it says of ping targets naming a node of
// a tenant other than that one is stripped, as for any report; so is what
// it says of targets foreign to the node's new tenant, which the stream
// has no definitions of (dropped, like what guardReport strips).
func (s *Server) destination(ctx context.Context, st *stream, r *nbsv1.Report) (int32, error) {
	fr, ok := s.registry.(FormerRows)
	if !ok || !time.Unix(0, r.GetTimeUnixNano()).Before(st.node.LastHello) {
		return st.node.ID, nil
	}
	if st.tenancy == nil {
		st.tenancy = &streamTenancy{}
	}
	t := st.tenancy
	if !t.looked {
		former, err := fr.FormerRow(ctx, st.node.Name, st.node.ID)
		if err != nil {
			s.log.Error("look up the node's row before its move", "node", st.node.Name, "err", err)
			return 0, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
		}
		t.former, t.looked = former, true
	}
	if t.former.ID == 0 || !time.Unix(0, r.GetTimeUnixNano()).Before(t.former.Until) {
		return st.node.ID, nil
	}
	if s.guard != nil {
		var targets pingTargets
		for _, x := range r.GetSamples() {
			targets.add(x.GetMetricId())
		}
		for _, x := range r.GetHistograms() {
			targets.add(x.GetMetricId())
		}
		for _, x := range r.GetEvents() {
			targets.add(x.GetMetricId())
		}
		foreign, err := s.guard.ForeignPingTargets(ctx, store.Node{Name: st.node.Name, Tenant: t.former.Tenant}, targets.list)
		if err != nil {
			s.log.Error("check ping targets", "node", st.node.Name, "err", err)
			return 0, status.Error(codes.Unavailable, "collector cannot reach its database; retry later")
		}
		stripForeign(r, foreign)
	}
	s.log.Info("a report from before the node's move is stored with the tenant it had then", "node", st.node.Name,
		"seq", r.GetSequence(), "tenant", t.former.Tenant, "moved_at", t.former.Until)
	return t.former.ID, nil
}
