package nodeconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/leader"
	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// notifyChannel carries config changes between collectors.
const notifyChannel = "nbs_config"

// Pusher sends the recomputed Config to nodes connected to this collector.
type Pusher interface {
	PushConfig(ctx context.Context, nodes ...string)
}

type Service struct {
	repo   repo
	store  *store.Store
	log    *slog.Logger
	pusher Pusher
	// maxOverrides caps the stored overrides (SetMaxOverrides).
	maxOverrides int

	peers *peerSet
	// shared is the overrides as of a read, shared by the configs
	// computed while it was fresh (sharedOverrides).
	shared sharedOverrides

	mu     sync.Mutex
	expand map[string]expansion // by node
	runCtx context.Context      // Listen's, once it runs
}

// expansion is an operator's expand of one node: stream the full tree
// until, and let the agent's BPF programs use budget percent of a CPU
// meanwhile (0: the agent's own --overhead.budget).
type expansion struct {
	until  time.Time
	budget float64
}

func New(st *store.Store, log *slog.Logger) *Service {
	return &Service{repo: repo{st.Pool()}, store: st, log: log, expand: map[string]expansion{}, maxOverrides: DefaultMaxOverrides,
		peers: &peerSet{k: DefaultPingPeers, pool: st.Pool(), log: log}}
}

// SetPusher connects the service to the ingest server (which in turn asks
// the service for configs, hence the setter).
func (s *Service) SetPusher(p Pusher) { s.pusher = p }

// SetMaxOverrides sets how many threshold overrides may be stored.
func (s *Service) SetMaxOverrides(n int) { s.maxOverrides = n }

var _ ingest.ConfigSource = (*Service)(nil)

// ConfigFor computes a node's effective Config.
func (s *Service) ConfigFor(ctx context.Context, n store.Node) (*nbsv1.Config, error) {
	overrides, err := s.shared.get(ctx, s.repo)
	if err != nil {
		return nil, err
	}
	// Only the metrics the node has: overrides of others would do nothing
	// there, and would let the overrides of a whole fleet outgrow the
	// message every agent can receive. Only those with an override in
	// force are looked up: the node's whole tree (about 200 rows), read
	// for every Hello, was most of what a fleet registering asked of the
	// database beside storing it (BENCHMARKS.md, "Fleet").
	var has map[string]bool
	best := Resolve(n, overrides)
	if len(best) > 0 {
		if has, err = s.repo.metricsOf(ctx, n.ID, slices.Collect(maps.Keys(best))); err != nil {
			return nil, err
		}
	}
	cfg := thresholdsConfig(best, has)
	cfg.Version = uint64(time.Now().UnixNano())
	s.mu.Lock()
	if e, ok := s.expand[n.Name]; ok && time.Now().Before(e.until) {
		cfg.ExpandUntilUnixNano = e.until.UnixNano()
		cfg.ExpandBudgetPercent = e.budget
	}
	s.mu.Unlock()
	if cfg.PingTargets, err = s.pingTargets(ctx, n); err != nil {
		return nil, err
	}
	return cfg, nil
}

// sharedOverrides lets the configs computed at once share their reads of
// the overrides: a fleet registering asks for a Config with every Hello,
// and a read of every override for each, on the connections the writers
// that ack reports need, queued the Hellos behind one another
// (BENCHMARKS.md, "Fleet"). A config shares a read only if the read began
// after it asked, so it reflects every change committed before: what a
// read of its own would have seen.
type sharedOverrides struct {
	mu     sync.Mutex // held through a read: who asks meanwhile waits for it
	list   []Override // read-only once stored: configs share it
	readAt time.Time  // when the read of list began
	reads  int        // for tests
}

func (o *sharedOverrides) get(ctx context.Context, r repo) ([]Override, error) {
	asked := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.readAt.IsZero() && o.readAt.After(asked) {
		return o.list, nil
	}
	began := time.Now()
	list, err := r.list(ctx)
	o.reads++
	if err != nil {
		return nil, err
	}
	o.list, o.readAt = list, began
	return list, nil
}

// thresholdsConfig is the threshold part of a node's Config: the overrides
// in force on it (Resolve's), for the metrics it has.
func thresholdsConfig(best map[string]*Override, has map[string]bool) *nbsv1.Config {
	cfg := &nbsv1.Config{Thresholds: map[string]*nbsv1.Threshold{}}
	for metric, o := range best {
		if !has[metric] {
			continue
		}
		if o.Disabled {
			cfg.DisabledThresholds = append(cfg.DisabledThresholds, metric)
			continue
		}
		cfg.Thresholds[metric] = thresholdProto(*o.Threshold)
	}
	slices.Sort(cfg.DisabledThresholds)
	return cfg
}

func thresholdProto(t store.Threshold) *nbsv1.Threshold {
	c := nbsv1.Comparison_COMPARISON_ABOVE
	if t.Comparison == "below" {
		c = nbsv1.Comparison_COMPARISON_BELOW
	}
	return &nbsv1.Threshold{Warn: t.Warn, Crit: t.Crit, Comparison: c, HoldIntervals: t.HoldIntervals, BaselineIntervals: t.BaselineIntervals, Floor: t.Floor}
}

// Effective resolves every metric of a node: override, else catalogue default.
func (s *Service) Effective(ctx context.Context, n store.Node, defs []store.MetricDef) ([]Effective, error) {
	overrides, err := s.repo.list(ctx)
	if err != nil {
		return nil, err
	}
	best := Resolve(n, overrides)
	out := make([]Effective, 0, len(defs))
	for _, d := range defs {
		e := Effective{Metric: d.Path, Threshold: d.DefaultThreshold, Source: "default"}
		if o := best[d.Path]; o != nil {
			e.Threshold, e.Source, e.OverrideID = o.Threshold, o.Source(), o.ID
			if o.Disabled {
				e.Threshold = nil
				e.Source += " (disabled)"
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// Thresholds implements api.Thresholds: effective thresholds by metric.
func (s *Service) Thresholds(ctx context.Context, n store.Node, defs []store.MetricDef) (map[string]*store.Threshold, error) {
	eff, err := s.Effective(ctx, n, defs)
	if err != nil {
		return nil, err
	}
	m := make(map[string]*store.Threshold, len(eff))
	for _, e := range eff {
		m[e.Metric] = e.Threshold
	}
	return m, nil
}

type change struct {
	Kind  string `json:"kind"` // thresholds, expand or peers
	Node  string `json:"node,omitempty"`
	Until int64  `json:"until,omitempty"`
	// Budget is an expand's raised overhead budget (percent), 0 for none.
	Budget float64 `json:"budget,omitempty"`
}

// announceTimeout bounds making, applying and announcing one change. A
// change must not depend on the request that made it: a client that hangs
// up must not leave a change committed that other collectors never hear of.
const announceTimeout = 30 * time.Second

// changeContext is the context a change runs in once its request is read:
// detached from the request's cancellation (keeping its values: who asked,
// for the audit log), bounded by its own timeout.
func changeContext(req context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(req), announceTimeout)
}

// announce applies a committed change here at once and tells the other
// collectors, on a context detached from ctx's cancellation.
func (s *Service) announce(ctx context.Context, c change) {
	ctx, cancel := changeContext(ctx)
	defer cancel()
	payload, _ := json.Marshal(c)
	// Other collectors first: pushing here computes a Config per local
	// stream, and they need not wait for that.
	if _, err := s.repo.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, string(payload)); err != nil {
		s.log.Warn("notify other collectors", "kind", c.Kind, "err", err)
	}
	s.apply(ctx, c)
}

func (s *Service) apply(ctx context.Context, c change) {
	if s.pusher == nil {
		return
	}
	switch c.Kind {
	case "thresholds":
		s.pusher.PushConfig(ctx)
	case "peers":
		// Read the new fleet first, so the configs below use it and this
		// change is not taken for another one.
		if _, _, err := s.peers.current(ctx, nil, true); err != nil {
			s.log.Warn("read ping peers", "err", err)
		}
		s.pusher.PushConfig(ctx)
	case "expand":
		s.mu.Lock()
		// The expand that ends last sets the end; the budget is the
		// largest asked by any expand still in force.
		cur, until := s.expand[c.Node], time.Unix(0, c.Until)
		if time.Now().After(cur.until) {
			cur = expansion{}
		}
		s.expand[c.Node] = expansion{until: later(cur.until, until), budget: max(cur.budget, c.Budget)}
		for n, e := range s.expand {
			if time.Now().After(e.until) {
				delete(s.expand, n)
			}
		}
		s.mu.Unlock()
		s.pusher.PushConfig(ctx, c.Node)
	}
}

// Listen follows other collectors' changes until ctx ends, on a dedicated
// connection that is opened again after database errors.
func (s *Service) Listen(ctx context.Context, pool *pgxpool.Pool) {
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.refreshPeers(ctx) })
	leader.Session{Pool: pool, Name: "nbs-collector config listener", Retry: time.Second, Log: s.log}.Run(ctx, s.follow)
}

// follow applies the changes other collectors announce.
func (s *Service) follow(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return fmt.Errorf("listen %s: %w", notifyChannel, err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for config changes: %w", err)
		}
		var c change
		if err := json.Unmarshal([]byte(n.Payload), &c); err != nil {
			s.log.Warn("ignoring malformed config notification", "payload", n.Payload, "err", err)
			continue
		}
		s.apply(ctx, c)
	}
}

// The routes to these handlers are in api.Routes.
var _ api.NodeConfigHandlers = (*Service)(nil)

// ListOverrides serves GET /thresholds: every override; to a customer, the
// global ones and those that apply to one of its nodes, so it learns
// neither another tenant's selectors nor its node names.
func (s *Service) ListOverrides(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	os, err := s.repo.list(ctx)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if !access.FromContext(ctx).SeesAll() {
		nodes, err := s.store.NodesIn(ctx, api.Scope(r))
		if err != nil {
			httpjson.WriteError(w, r, err, s.log)
			return
		}
		view := api.ViewOf(ctx)
		os = slices.DeleteFunc(os, func(o Override) bool {
			return !view.Metric(o.Metric) || (o.Scope.Kind != "global" && !slices.ContainsFunc(nodes, o.matches))
		})
	}
	if os == nil {
		os = []Override{}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"overrides": os})
}

// PutOverride serves PUT /thresholds: sets the override of a scope and
// metric, replacing the one there was.
func (s *Service) PutOverride(w http.ResponseWriter, r *http.Request) {
	var o Override
	if err := httpjson.Decode(r, &o); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if err := o.Validate(); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	// From here the change is made whole whether or not the client stays:
	// a commit the collector saw fail only because the request was
	// cancelled would be a change no agent hears of.
	ctx, cancel := changeContext(r.Context())
	defer cancel()
	if err := s.checkScope(ctx, o); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	stored, err := s.repo.put(ctx, o, s.maxOverrides)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.log.Info("threshold override set", "id", stored.ID, "metric", stored.Metric, "scope", stored.Source())
	s.announce(ctx, change{Kind: "thresholds"})
	httpjson.Write(w, http.StatusOK, stored)
}

// DeleteOverride serves DELETE /thresholds/{id}.
func (s *Service) DeleteOverride(w http.ResponseWriter, r *http.Request) {
	raw := chi.URLParam(r, "id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, "override id %s is not a number", api.Quote(raw)), s.log)
		return
	}
	ctx, cancel := changeContext(r.Context())
	defer cancel()
	ok, err := s.repo.delete(ctx, id)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if !ok {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.NotFound, "threshold override %d: not found", id), s.log)
		return
	}
	s.announce(ctx, change{Kind: "thresholds"})
	w.WriteHeader(http.StatusNoContent)
}

// node looks up the route's {node} among the nodes the caller sees.
func (s *Service) node(r *http.Request) (store.Node, error) {
	name, err := api.NodeParam(r)
	if err != nil {
		return store.Node{}, err
	}
	return s.store.NodeByNameIn(r.Context(), api.Scope(r), name)
}

// NodeThresholds serves GET /nodes/{node}/thresholds: the threshold in
// force for each metric of the node, and where it comes from.
func (s *Service) NodeThresholds(w http.ResponseWriter, r *http.Request) {
	n, err := s.node(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	defs, err := s.store.Definitions(r.Context(), n.ID)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if defs, err = api.WithoutForeignPing(r.Context(), s.store, api.Scope(r), defs); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	eff, err := s.Effective(r.Context(), n, defs)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	// A customer sees no threshold of a staff-only metric (api.View).
	view := api.ViewOf(r.Context())
	eff = slices.DeleteFunc(eff, func(e Effective) bool { return !view.Metric(e.Metric) })
	httpjson.Write(w, http.StatusOK, map[string]any{"node": n.Name, "thresholds": eff})
}

// maxExpand bounds how long one request keeps a node's full tree streaming.
const maxExpand = time.Hour

// maxExpandBudget bounds the overhead budget an expand may raise a node to
// (percent of one CPU for all the agent's BPF programs), as the agent caps
// it (agent/source/agent.MaxExpandBudgetPercent).
const maxExpandBudget = 25.0

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ExpandNode serves POST /nodes/{node}/expand: the node streams its whole
// tree for the given seconds.
func (s *Service) ExpandNode(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Seconds int `json:"seconds"`
		// BudgetPercent raises the node's overhead budget while the
		// expand lasts; 0 or absent keeps the agent's.
		BudgetPercent float64 `json:"budget_percent"`
	}
	if err := httpjson.Decode(r, &req); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	if req.Seconds < 1 || req.Seconds > int(maxExpand/time.Second) { // compared in seconds: a huge count would overflow a Duration
		httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, "seconds %d must be from 1 to %d", req.Seconds, int(maxExpand.Seconds())), s.log)
		return
	}
	if req.BudgetPercent < 0 || req.BudgetPercent > maxExpandBudget {
		httpjson.WriteError(w, r, errkind.Errorf(errkind.Invalid, "budget_percent %g must be from 0 (the agent's own) to %g (percent of one CPU)",
			req.BudgetPercent, maxExpandBudget), s.log)
		return
	}
	n, err := s.node(r)
	if err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	until := time.Now().Add(time.Duration(req.Seconds) * time.Second)
	ctx, cancel := changeContext(r.Context())
	defer cancel()
	if err := access.Audit(ctx, s.repo.pool, access.Entry{Action: "expand", ObjectKind: "node", ObjectID: n.Name,
		New: map[string]any{"seconds": req.Seconds, "until": until.UTC(), "budget_percent": req.BudgetPercent}}); err != nil {
		httpjson.WriteError(w, r, err, s.log)
		return
	}
	s.announce(ctx, change{Kind: "expand", Node: n.Name, Until: until.UnixNano(), Budget: req.BudgetPercent})
	// What the agent last said of its triggered sources: one detached over
	// its budget shows here, not only in the agent's log.
	triggered, err := store.Triggered(ctx, s.store, n.ID, time.Now())
	if err != nil {
		s.log.Warn("read the triggered sources' state for an expand", "node", n.Name, "err", err)
	}
	if triggered == nil {
		triggered = []store.TriggeredState{}
	}
	httpjson.Write(w, http.StatusAccepted, map[string]any{"node": n.Name, "until": until.UTC(), "budget_percent": req.BudgetPercent,
		"triggered": triggered})
}
