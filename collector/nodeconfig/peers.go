package nodeconfig

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// The ping mesh. Every node that announces a ping address is a candidate
// peer. The candidates are laid out on K/2 rings, each ordered by a
// different hash of the node name (K/2 random permutations of the fleet),
// and each node pings its successor and predecessor on every ring. So:
//   - the choice is deterministic and identical on every collector, with
//     no state to share;
//   - every node pings K others and is pinged by exactly those K (a node
//     is its neighbours' neighbour), so no node goes unwatched; the rare
//     peer that is a neighbour on two rings makes the set one smaller;
//   - it is stable: a node joining or leaving changes one peer of each of
//     its K neighbours and nothing else;
//   - the rings are random, so a node's peers are spread over racks: a
//     mesh that crosses them is what finds a bad link between them;
//   - it does not cross tenants: each tenant (the value of the operator's
//     --tenant.label, bound server-side: collector/tenant) and the nodes
//     without one are a mesh of their own, because a ping target is named
//     after its peer, and a customer must never see another customer's
//     node names (in its tree, series, alerts or reports).
//
// A fleet of at most K+1 such nodes is a full mesh. A node without a ping
// address pings the neighbours it would have and is pinged by no one.

// DefaultPingPeers is how many peers each node pings.
const DefaultPingPeers = 8

const (
	// A node silent for this long (no Hello, no report) is no longer
	// handed out as a peer; until then its pingers report it lost, which
	// is the point while it is down.
	peerMaxAge = 15 * time.Minute
	// peerPushDelay coalesces a burst of joins (a fleet starting) into one
	// push of new peer sets to every node: the push waits until the fleet's
	// peers have not changed for peerPushDelay, and at most
	// peerPushMaxDelay after the first change. A push is a Config to every
	// connected node, so a push every peerPushDelay while 30,000 register
	// (a change each batch) sent some 180,000 Configs in that minute, each
	// costing registration CPU, more the more nodes were connected.
	peerPushDelay    = 5 * time.Second
	peerPushMaxDelay = 30 * time.Second
	// peerRefreshEvery re-reads the fleet to notice nodes that went silent.
	peerRefreshEvery = time.Minute
)

type peer struct {
	name, addr string
	tenant     string // the node's tenant; "" for none
}

// fleetNode is one current node as the tenancy checks see it: every node,
// silent or not, with a ping address or not.
type fleetNode struct {
	tenant, addr string
}

// peerSet caches the candidate peers and notices when they change.
type peerSet struct {
	k    int
	pool *pgxpool.Pool

	mu      sync.Mutex
	list    []peer // by name
	log     *slog.Logger
	refused map[string]bool      // nodes whose ping address another tenant holds
	taken   prometheus.Gauge     // their count, when set (SetMetrics)
	nodes   map[string]fleetNode // every current node, by name
	// renamed are the nodes whose ping target segment is not their name
	// (catalog.PingSegment: longer than 128 bytes, or "clock"), by segment.
	renamed map[string]fleetNode
	meshes  map[string]*mesh // of list's tenants, for k
	fp      uint64           // fingerprint of list; 0 before the first read
	readAt  time.Time
	reads   int  // of the fleet so far
	pending bool // a push of new peer sets is scheduled
	// firstChange and lastChange bound the pending push (peerPushDelay).
	firstChange, lastChange time.Time
}

// read returns the candidate peers, and every current node for the
// tenancy checks (ForeignPingTargets). The whole fleet is one row a node,
// read once a minute by each collector.
func (p *peerSet) read(ctx context.Context) ([]peer, map[string]fleetNode, error) {
	var refused []peer
	// A node is fresh by its last Hello or its last report. The report's
	// time is looked up only for a node whose Hello is old: a fleet
	// registering (each Hello of which asks for a read: currentAsOf) is
	// all recent Hellos, and a probe into node_latest's wide rows for
	// each of its nodes was most of the read (50,000 nodes: 260 against
	// 54-74 ms, the same rows; BENCHMARKS.md, "Fleet").
	rows, err := p.pool.Query(ctx, `
		SELECT n.name, n.ping_address, n.tenant, n.last_hello > now() - make_interval(secs => $1)
			OR (SELECT l.ts FROM node_latest l WHERE l.node_id = n.id) > now() - make_interval(secs => $1)
		FROM nodes n
		WHERE n.retired_at IS NULL
		ORDER BY n.first_seen, n.id`, peerMaxAge.Seconds())
	if err != nil {
		return nil, nil, fmt.Errorf("read ping peers: %w", err)
	}
	defer rows.Close()
	var out []peer
	all := map[string]fleetNode{}
	// The first node (by first_seen) to announce an address holds it for
	// its tenant: a node of another tenant announcing the same address is
	// no ping peer (noteRefused logs and counts it). Refusing its Hello
	// instead would lose everything else it measures, which is its
	// tenant's own; and the address may be a mistake of either.
	holder := map[string]string{}
	for rows.Next() {
		var (
			pr    peer
			fresh *bool
		)
		if err := rows.Scan(&pr.name, &pr.addr, &pr.tenant, &fresh); err != nil {
			return nil, nil, fmt.Errorf("read ping peers: %w", err)
		}
		all[pr.name] = fleetNode{tenant: pr.tenant, addr: pr.addr}
		if pr.addr == "" || fresh == nil || !*fresh {
			continue
		}
		if t, taken := holder[pr.addr]; taken && t != pr.tenant {
			refused = append(refused, pr)
			continue
		}
		holder[pr.addr] = pr.tenant
		out = append(out, pr)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read ping peers: %w", err)
	}
	slices.SortFunc(out, func(a, b peer) int { return strings.Compare(a.name, b.name) })
	p.noteRefused(refused)
	return out, all, nil
}

// current returns the mesh of n's tenant, as n would see it: a node whose
// own announcement is missing from the cache (it just joined, or changed
// its address or customer) forces a fresh read. changed reports that the
// fleet's peers differ from what earlier configs were computed from.
func (p *peerSet) current(ctx context.Context, n *store.Node, force bool) (m *mesh, changed bool, err error) {
	var readBefore time.Time
	if force {
		readBefore = time.Now()
	}
	return p.currentAsOf(ctx, n, readBefore)
}

// currentAsOf is current, reading the fleet again if the cache was read
// before readBefore: callers that decide to force a read at the same
// moment then cause one read, not one each.
//
// A node the cache does not reflect asks for a read that began after it
// asked, not for a read of its own: every Hello of a fleet registering
// is such a node (the tenancy check runs before its node is stored, so no
// read could reflect it then), and a read of its own each, one after
// another under mu, made registering quadratic in the fleet (30,000 nodes
// at about 100 a second: BENCHMARKS.md, "Fleet"). The Hellos waiting
// while one read runs share the next.
func (p *peerSet) currentAsOf(ctx context.Context, n *store.Node, readBefore time.Time) (m *mesh, changed bool, err error) {
	asked := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	tenant := ""
	if n != nil {
		tenant = n.Tenant
		if !p.reflects(*n) && asked.After(readBefore) {
			readBefore = asked
		}
	}
	if p.readAt.Before(readBefore) || p.fp == 0 || time.Since(p.readAt) >= peerRefreshEvery {
		// The cache is as of when its read began: a node stored while
		// the query ran may be missing from it.
		began := time.Now()
		list, all, err := p.read(ctx)
		p.reads++
		if err != nil {
			return nil, false, err
		}
		fp := fingerprint(list)
		changed = p.fp != 0 && fp != p.fp
		p.list, p.fp, p.readAt, p.meshes = list, fp, began, nil
		p.nodes, p.renamed = all, map[string]fleetNode{}
		for name, n := range all {
			if seg := catalog.PingSegment(name); seg != name {
				p.renamed[seg] = n
			}
		}
	}
	if p.meshes == nil {
		p.meshes = map[string]*mesh{}
	}
	if m = p.meshes[tenant]; m == nil || m.k != p.k {
		var same []peer
		for _, pr := range p.list {
			if pr.tenant == tenant {
				same = append(same, pr)
			}
		}
		m = newMesh(same, p.k)
		p.meshes[tenant] = m
	}
	return m, changed, nil
}

// reflects says whether the cached fleet agrees with what n announced.
func (p *peerSet) reflects(n store.Node) bool {
	c, ok := p.nodes[n.Name]
	return ok && c.addr == n.PingAddress && c.tenant == n.Tenant
}

// noteRefused logs each node whose ping address another tenant's node
// announced first, once while it stays so; the count of such nodes is
// in every line.
func (p *peerSet) noteRefused(refused []peer) {
	now := map[string]bool{}
	for _, pr := range refused {
		now[pr.name] = true
		if !p.refused[pr.name] && p.log != nil {
			p.log.Warn("ping address announced by a node of another tenant first: this node is no ping peer until it announces another (--ping.address)",
				"node", pr.name, "tenant", pr.tenant, "ping_address", pr.addr, "refused_nodes", len(refused))
		}
	}
	p.refused = now
	if p.taken != nil {
		p.taken.Set(float64(len(now)))
	}
}

func fingerprint(list []peer) uint64 {
	h := fnv.New64a()
	for _, pr := range list {
		h.Write([]byte(pr.name))
		h.Write([]byte{0})
		h.Write([]byte(pr.addr))
		h.Write([]byte{0})
		h.Write([]byte(pr.tenant))
		h.Write([]byte{0})
	}
	return h.Sum64() | 1 // never 0, which means "not read yet"
}

// mesh is the fleet's candidates laid out on rings, built once per
// candidate list so each config costs O(K log N).
type mesh struct {
	k     int
	all   []peer       // every candidate, for a full mesh
	rings [][]ringSlot // each sorted by pos
}

type ringSlot struct {
	pos uint64
	peer
}

func newMesh(candidates []peer, k int) *mesh {
	m := &mesh{k: k, all: candidates}
	if k <= 0 || len(candidates) <= k+1 {
		return m
	}
	for r := range (k + 1) / 2 {
		ring := make([]ringSlot, len(candidates))
		for i, c := range candidates {
			ring[i] = ringSlot{ringPos(r, c.name), c}
		}
		sort.Slice(ring, func(i, j int) bool { return ring[i].before(ring[j].pos, ring[j].name) })
		m.rings = append(m.rings, ring)
	}
	return m
}

func (s ringSlot) before(pos uint64, name string) bool {
	return s.pos < pos || (s.pos == pos && s.name < name)
}

// peersOf returns node's ping targets as "name=address".
func (m *mesh) peersOf(node string) []string {
	var out []string
	add := func(p peer) {
		t := p.name + "=" + p.addr
		if p.name != node && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if m.k <= 0 {
		return nil
	}
	if m.rings == nil {
		for _, p := range m.all {
			add(p)
		}
		return out
	}
	for r, ring := range m.rings {
		pos := ringPos(r, node)
		i := sort.Search(len(ring), func(i int) bool { return !ring[i].before(pos, node) })
		succ := i % len(ring) // where node sits or would be inserted
		if ring[succ].name == node {
			succ = (i + 1) % len(ring)
		}
		pred := (i - 1 + len(ring)) % len(ring)
		add(ring[succ].peer)
		// With an odd K the last ring gives only a successor.
		if 2*r+1 < m.k {
			add(ring[pred].peer)
		}
	}
	return out
}

// ringPos places a name on ring r: FNV-1a of both, finished with the
// splitmix64 mixer so similar names (web-1, web-2) spread evenly.
func ringPos(r int, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte{byte(r), byte(r >> 8), 0})
	h.Write([]byte(name))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// pingTargets is the peer part of a node's Config. A change in the fleet's
// peers schedules one push of fresh configs to every node, here and (via
// NOTIFY) on the other collectors.
func (s *Service) pingTargets(ctx context.Context, n store.Node) ([]string, error) {
	m, changed, err := s.peers.current(ctx, &n, false)
	if err != nil {
		return nil, err
	}
	if changed {
		s.schedulePeerPush()
	}
	return m.peersOf(n.Name), nil
}

func (s *Service) schedulePeerPush() {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	now := time.Now()
	s.peers.lastChange = now
	if s.peers.pending {
		return
	}
	s.peers.pending, s.peers.firstChange = true, now
	var fire func()
	fire = func() {
		s.peers.mu.Lock()
		if wait := pushWait(s.peers.firstChange, s.peers.lastChange, time.Now()); wait > 0 {
			s.peers.mu.Unlock()
			time.AfterFunc(wait, fire)
			return
		}
		s.peers.pending = false
		s.peers.mu.Unlock()
		ctx := s.baseContext()
		if ctx.Err() != nil {
			return
		}
		s.log.Info("ping peers changed; pushing new peer sets")
		s.announce(ctx, change{Kind: "peers"})
	}
	time.AfterFunc(peerPushDelay, fire)
}

// pushWait is how much longer a pending push of peer sets waits at now:
// until the peers have been still for peerPushDelay since the last
// change, and no longer than peerPushMaxDelay after the first.
func pushWait(first, last, now time.Time) time.Duration {
	return min(last.Add(peerPushDelay).Sub(now), first.Add(peerPushMaxDelay).Sub(now))
}

// refreshPeers re-reads the fleet periodically, so a node that went silent
// leaves its pingers' peer sets without anyone joining.
func (s *Service) refreshPeers(ctx context.Context) {
	t := time.NewTicker(peerRefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, changed, err := s.peers.current(ctx, nil, true)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("refresh ping peers", "err", err)
			}
			continue
		}
		if changed {
			s.schedulePeerPush()
		}
	}
}

// baseContext is the context of Listen (the collector's run), for work
// started by timers.
func (s *Service) baseContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runCtx == nil {
		return context.Background()
	}
	return s.runCtx
}

// SetPingPeers sets how many peers each node pings (0 or less turns the
// mesh off).
func (s *Service) SetPingPeers(k int) {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	s.peers.k = max(k, 0)
}

// ForeignPingTargets implements ingest.PingGuard from the cached fleet
// (refreshed every minute, and at once by a moved node's Hello): the ping
// targets whose name is that of a current node of a tenant other than
// node's. A mesh peer's target is named after its node, so a peer the
// agent kept from before its tenant was bound or changed is one of them.
// Addresses are not compared: tenants' address spaces may overlap (a
// gateway at 10.0.0.1 in each), and the collector never tells a node
// another tenant's addresses, so one there came from the agent's own
// --ping.targets. A target naming a node of the same tenant, or no node
// at all, is the node's own business.
func (s *Service) ForeignPingTargets(ctx context.Context, node store.Node, targets []ingest.PingTarget) ([]string, error) {
	if len(targets) == 0 {
		return nil, nil
	}
	// node forces a read when the cache does not know it as it is now (it
	// was just bound or moved); so does a target that looks foreign in a
	// cache older than foreignRecheck (its node may have moved into node's
	// tenant since), at most once that often.
	foreign, readAt, err := s.foreignIn(ctx, node, targets, time.Time{})
	if err == nil && len(foreign) > 0 && time.Since(readAt) > foreignRecheck {
		foreign, _, err = s.foreignIn(ctx, node, targets, readAt.Add(time.Nanosecond))
	}
	return foreign, err
}

// foreignRecheck is how old the cached fleet may be for a target that
// looks foreign not to be read again.
const foreignRecheck = time.Second

func (s *Service) foreignIn(ctx context.Context, node store.Node, targets []ingest.PingTarget, readBefore time.Time) ([]string, time.Time, error) {
	_, changed, err := s.peers.currentAsOf(ctx, &node, readBefore)
	if err != nil {
		return nil, time.Time{}, err
	}
	if changed {
		// As pingTargets does: the read that notices a change pushes it.
		s.schedulePeerPush()
	}
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	var out []string
	for _, t := range targets {
		n, ok := s.peers.nodes[t.Name]
		if !ok {
			n, ok = s.peers.renamed[t.Name]
		}
		if ok && n.tenant != node.Tenant {
			out = append(out, t.ID)
		}
	}
	return out, s.peers.readAt, nil
}

// SetMetrics reports the nodes whose ping address another tenant holds in
// m.PingAddressesTaken.
func (s *Service) SetMetrics(m *telemetry.Metrics) {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	s.peers.taken = m.PingAddressesTaken
}
