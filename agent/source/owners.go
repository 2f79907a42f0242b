package source

import (
	"cmp"
	"maps"
	"slices"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/owner"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// How owners earn and lose a child of their own. Scores are counts with a
// half-life of one collection. A newcomer takes the place of the weakest
// child only with more than twice its score, and only from a child that
// has had its place for minHold collections: ids change rarely, so each
// owner's series stays continuous and few ids reach the collector.
const (
	ownerDecay    = 0.5
	ownerEvictBy  = 2.0
	ownerMinHold  = 6
	ownerForgetAt = 0.01
)

// Owners splits counters that the kernel keeps per network namespace (a
// reset or drop reason) into children by what owns each namespace (package
// owner): the top owners get a child each, the rest share "other", so a
// parent never has more than top+1 children however many pods a node runs.
//
// Counts are attributed as they grow: each collection, an inode's increase
// goes to its owner at that moment. A child counts from when its owner got
// it, "other" counts everything else, so every increase lands in exactly one
// child and the children's increases add up to the parent's exactly, also
// when an owner gains or loses its child (it is then retired). Split is
// not safe for concurrent use (one source's collections call it); Annotate
// is, for evidence readers.
type Owners struct {
	resolver *owner.Resolver
	top      int
	parents  map[string]*ownerSplit
	round    uint64
}

type ownerSplit struct {
	prev      map[uint32]uint64 // cumulative per inode at the last collection
	slots     map[string]*ownerSlot
	scores    map[string]float64 // recent activity of every owner seen lately
	other     uint64             // cumulative
	otherSeen bool
}

type ownerSlot struct {
	owner owner.Owner
	count uint64 // cumulative since the owner got its child
	since uint64 // round it got it
}

// NewOwners splits by resolver's owners into top children per parent
// (catalog.DefaultTopOwners if top <= 0).
func NewOwners(resolver *owner.Resolver, top int) *Owners {
	if top <= 0 {
		top = catalog.DefaultTopOwners
	}
	return &Owners{resolver: resolver, top: top, parents: map[string]*ownerSplit{}}
}

// ByNetns are parents' cumulative counts by namespace inode, as Split
// takes them.
type ByNetns map[string]map[uint32]uint64

// Add counts v of m in namespace ns, into m's own counter in r too, and
// adds m to r's metrics the first time it is counted.
func (b ByNetns) Add(r *Reading, m catalog.Metric, ns uint32, v uint64) {
	if b[m.ID] == nil {
		b[m.ID] = map[uint32]uint64{}
		r.Metrics = append(r.Metrics, m)
	}
	b[m.ID][ns] += v
	r.Counters[m.ID] += v
}

// Split adds to r the owner children of each parent in byNetns, whose
// values are the parent's cumulative counts by namespace inode; inode 0
// holds what the kernel could not split and goes to "other". The parent's
// own counter in r must be the sum of its inode counts. The parents'
// definitions come from r.Metrics.
func (o *Owners) Split(r *Reading, byNetns ByNetns) {
	o.round++
	defs := make(map[string]catalog.Metric, len(r.Metrics))
	for _, m := range r.Metrics {
		defs[m.ID] = m
	}
	deltas := make(map[string]map[uint32]uint64, len(byNetns))
	var grew []uint32
	for id, counts := range byNetns {
		sp := o.parents[id]
		if sp == nil {
			sp = &ownerSplit{slots: map[string]*ownerSlot{}, scores: map[string]float64{}}
			o.parents[id] = sp
		}
		d := make(map[uint32]uint64, len(counts))
		for ino, v := range counts {
			inc := v - sp.prev[ino]
			if v < sp.prev[ino] { // a counter that restarted counts from 0
				inc = v
			}
			if inc > 0 {
				d[ino] = inc
				if ino != 0 {
					grew = append(grew, ino)
				}
			}
		}
		sp.prev = counts
		deltas[id] = d
	}
	owners := o.resolver.Lookup(grew...)
	for _, id := range slices.Sorted(maps.Keys(byNetns)) {
		parent, ok := defs[id]
		if !ok {
			continue
		}
		o.parents[id].apply(r, parent, deltas[id], owners, o.top, o.round)
	}
}

func (sp *ownerSplit) apply(r *Reading, parent catalog.Metric, deltas map[uint32]uint64, owners map[uint32]owner.Owner, top int, round uint64) {
	byOwner := map[string]uint64{}
	who := map[string]owner.Owner{}
	var unsplit uint64
	for ino, d := range deltas {
		if ino == 0 {
			unsplit += d
			continue
		}
		ow := owners[ino]
		id := ow.ID()
		byOwner[id] += d
		who[id] = ow
	}
	for id := range sp.scores {
		sp.scores[id] *= ownerDecay
	}
	for id, d := range byOwner {
		sp.scores[id] += float64(d)
	}

	// Newcomers, strongest first, take free places, then those of weak
	// children that have held theirs long enough.
	var newcomers []string
	for id := range byOwner {
		if sp.slots[id] == nil {
			newcomers = append(newcomers, id)
		}
	}
	slices.SortFunc(newcomers, func(a, b string) int {
		return cmp.Or(cmp.Compare(sp.scores[b], sp.scores[a]), cmp.Compare(a, b))
	})
	for _, id := range newcomers {
		if len(sp.slots) >= top {
			weakest := ""
			for sid, s := range sp.slots {
				if round-s.since < ownerMinHold {
					continue
				}
				if weakest == "" || sp.scores[sid] < sp.scores[weakest] || (sp.scores[sid] == sp.scores[weakest] && sid < weakest) {
					weakest = sid
				}
			}
			if weakest == "" || sp.scores[id] <= ownerEvictBy*sp.scores[weakest] {
				break // the next newcomer is weaker still
			}
			delete(sp.slots, weakest)
			r.Retired = append(r.Retired, parent.ID+"/"+weakest)
		}
		sp.slots[id] = &ownerSlot{owner: who[id], since: round}
	}

	other := unsplit
	for id, d := range byOwner {
		if s := sp.slots[id]; s != nil {
			s.count += d
			s.owner = who[id]
		} else {
			other += d
		}
	}
	for id, sc := range sp.scores {
		if sc < ownerForgetAt && sp.slots[id] == nil {
			delete(sp.scores, id)
		}
	}
	sp.other += other
	for _, id := range slices.Sorted(maps.Keys(sp.slots)) {
		s := sp.slots[id]
		m := catalog.OwnerChild(parent, id, s.owner.Label(), top)
		r.Metrics = append(r.Metrics, m)
		r.Counters[m.ID] = s.count
	}
	if sp.other > 0 || sp.otherSeen {
		sp.otherSeen = true
		m := catalog.OwnerOtherChild(parent, top)
		r.Metrics = append(r.Metrics, m)
		r.Counters[m.ID] = sp.other
	}
}

// EventFields is room for an evidence event's own fields and those
// Annotate adds (owner.Owner.AddFields' and owner_id): a map made with it
// does not grow, and copy itself, as Annotate fills it.
const EventFields = 16

// Annotate adds the owner of the namespace an evidence event names (its
// "netns" field, kept) to the event's fields, with owner_id, the id segment
// of the owner's child, so that the collector can list a child's events
// (they are recorded on the parent).
func (o *Owners) Annotate(e *nbsv1.Event, inode uint32) {
	if inode == 0 {
		return
	}
	ow := o.resolver.Owner(inode)
	if e.Fields == nil {
		e.Fields = make(map[string]string, EventFields)
	}
	ow.AddFields(e.Fields)
	e.Fields["owner_id"] = ow.ID()
}
