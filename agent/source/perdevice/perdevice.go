// Package perdevice keeps the per-device children of a triggered branch
// (latency/qdisc, latency/sizes, latency/ecn/devices): a device that
// carries packets gets a child whose id is its name, qualified by its
// network namespace unless that is the watched one; at most a bound of
// them exist, so devices beyond it count in the parent only; a child idle
// for too long retires and frees its id (a removed device, a container
// gone), and comes back if packets do.
package perdevice

import (
	"fmt"
	"sort"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/devtable"
)

// IDs hands out child ids, at most max of them in use at once.
type IDs struct {
	own  uint32 // the watched namespace: its devices go by name alone
	max  int
	used map[string]bool
}

// NewIDs returns no ids in use, for devices watched from namespace own.
func NewIDs(own uint32, max int) *IDs {
	return &IDs{own: own, max: max, used: map[string]bool{}}
}

// Assign returns a new id for the device name in namespace netns, or ""
// when max ids are in use.
func (ids *IDs) Assign(name string, netns uint32) string {
	if len(ids.used) >= ids.max {
		return ""
	}
	base := catalog.MetricSegment(name)
	if netns != ids.own {
		base = fmt.Sprintf("%s.ns%d", base, netns)
	}
	id := base
	for n := 2; ids.used[id]; n++ { // names differing only in case, or reused
		id = fmt.Sprintf("%s.%d", base, n)
	}
	ids.used[id] = true
	return id
}

// Release frees id for another device.
func (ids *IDs) Release(id string) { delete(ids.used, id) }

// Reset frees every id.
func (ids *IDs) Reset() { ids.used = map[string]bool{} }

// Netns is namespace netns as the catalogue shows a child's: 0 for the
// watched namespace.
func (ids *IDs) Netns(netns uint32) uint32 {
	if netns == ids.own {
		return 0
	}
	return netns
}

// Devices is what a source keeps per device of a per-device probe: its
// own state S (the deltas of the device's counters) and the device's
// child. Not safe for concurrent use: a triggered source holds it under
// its lock.
type Devices[S any] struct {
	ids        *IDs
	idleRetire int
	devs       map[devtable.Device]*device[S]
}

type device[S any] struct {
	state S
	id    string // "" while it has no child
	idle  int    // intervals without a packet
}

// NewDevices returns no devices, watched from namespace own, at most max
// with a child, a child retiring after more than idleRetire intervals
// without a packet.
func NewDevices[S any](own uint32, max, idleRetire int) *Devices[S] {
	return &Devices[S]{ids: NewIDs(own, max), idleRetire: idleRetire, devs: map[devtable.Device]*device[S]{}}
}

// State returns the source's state of d, zero for a device not seen before.
func (ds *Devices[S]) State(d devtable.Device) *S { return &ds.device(d).state }

func (ds *Devices[S]) device(d devtable.Device) *device[S] {
	dv, ok := ds.devs[d]
	if !ok {
		dv = &device[S]{}
		ds.devs[d] = dv
	}
	return dv
}

// Reset forgets every device and child: the probe was detached, and counts
// afresh from its next attachment.
func (ds *Devices[S]) Reset() {
	ds.devs = map[devtable.Device]*device[S]{}
	ds.ids.Reset()
}

// Child is what a device's child does in an interval.
type Child struct {
	// ID is the child's id; "" without a child, the device counting in
	// the parent only.
	ID string
	// Netns is the device's namespace as the catalogue shows it (IDs.Netns).
	Netns uint32
	// Retired: the child retires this interval (its metrics are to be
	// retired, not reported) and ID is free again.
	Retired bool
}

// Next ends an interval of d, which carried packets if active, and says
// what d's child does. Call it for the devices in a stable order (Sorted),
// so the same device wins when two compete for an id.
func (ds *Devices[S]) Next(d devtable.Device, active bool) Child {
	dv := ds.device(d)
	if active {
		dv.idle = 0
		if dv.id == "" {
			dv.id = ds.ids.Assign(d.Name, d.Netns)
		}
	} else {
		dv.idle++
	}
	if dv.id == "" {
		return Child{}
	}
	if dv.idle > ds.idleRetire {
		id := dv.id
		ds.ids.Release(id)
		dv.id = ""
		return Child{ID: id, Retired: true}
	}
	return Child{ID: dv.id, Netns: ds.ids.Netns(d.Netns)}
}

// Sorted returns the devices of m by namespace, then ifindex.
func Sorted[V any](m map[devtable.Device]V) []devtable.Device {
	keys := make([]devtable.Device, 0, len(m))
	for d := range m {
		keys = append(keys, d)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Netns != keys[j].Netns {
			return keys[i].Netns < keys[j].Netns
		}
		return keys[i].Ifindex < keys[j].Ifindex
	})
	return keys
}
