package drops

import (
	"strconv"
	"strings"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
)

// MaxDevices bounds the device children of each drops/device counter;
// devices beyond count in the counter only.
const MaxDevices = catalog.DeviceChildrenMax

// device is what the source remembers of one device.
type device struct {
	name string
	last map[string]uint64 // the kernel's counters at the previous reading
	own  map[string]uint64 // increases since the source first saw the device
	ids  map[string]string // child id by counter, once it has one
}

// kernel turns the kernel's conntrack and device counters into the
// children of drops/conntrack and drops/device.
type kernel struct {
	started bool
	// parent is each drops/device counter: at the first reading, the sum of
	// the devices' counters then (since boot, source.SinceBoot), plus every
	// increase since, so a device that leaves the namespace, or one that
	// arrives with counts of its own, neither lowers nor inflates it.
	parent   map[string]uint64
	devs     map[string]*device // by "ifindex:name"
	children map[string]int     // device children by counter
	used     map[string]bool    // child ids in use
	// ctWhy is why drops/conntrack is absent, "" while present; ctOn says
	// it was defined (to retire it when conntrack goes).
	ctWhy  string
	ctOn   bool
	devWhy string
}

func newKernel() *kernel {
	return &kernel{parent: map[string]uint64{}, devs: map[string]*device{}, children: map[string]int{}, used: map[string]bool{},
		ctWhy: "not read yet"}
}

// add puts one reading of conntrack (ctErr: why none) and of the devices
// into r.
func (k *kernel) add(r *source.Reading, ct conntrack, ctErr error, links []link) {
	switch {
	case ctErr != nil:
		k.ctWhy = ctErr.Error()
		if k.ctOn {
			r.Retired = append(r.Retired, catalog.DropsConntrack)
			k.ctOn = false
		}
	default:
		k.ctWhy, k.ctOn = "", true
		r.Metrics = append(r.Metrics, catalog.ConntrackTree()...)
		r.Counters[catalog.DropsConntrack] = ct.drop + ct.insertFailed
		r.Counters[catalog.DropsConntrackDrop] = ct.drop
		r.Counters[catalog.DropsConntrackInsertFailed] = ct.insertFailed
		r.Counters[catalog.DropsConntrackEarlyDrop] = ct.earlyDrop
		r.Gauges[catalog.DropsConntrackEntries] = float64(ct.count)
		if ct.max > 0 {
			r.Gauges[catalog.DropsConntrackUsage] = 100 * float64(ct.count) / float64(ct.max)
		} else {
			r.Idle = append(r.Idle, catalog.DropsConntrackUsage) // no maximum: nothing to be full
		}
	}
	if links == nil {
		return
	}
	counters := catalog.DeviceCounters()
	seen := make(map[string]bool, len(links))
	for _, l := range links {
		key := strconv.Itoa(int(l.index)) + ":" + l.name
		seen[key] = true
		d := k.devs[key]
		if d == nil {
			d = &device{name: l.name, last: l.stats, own: map[string]uint64{}, ids: map[string]string{}}
			k.devs[key] = d
			if !k.started {
				for _, c := range counters {
					k.parent[c.Metric.ID] += l.stats[c.Kernel]
				}
			}
			continue
		}
		for _, c := range counters {
			v, last := l.stats[c.Kernel], d.last[c.Kernel]
			inc := v - last
			if v < last {
				inc = v // the driver reset its counters (some do on down/up)
			}
			d.own[c.Kernel] += inc
			k.parent[c.Metric.ID] += inc
		}
		d.last = l.stats
	}
	k.started = true
	for key, d := range k.devs {
		if seen[key] {
			continue
		}
		for kern, id := range d.ids {
			r.Retired = append(r.Retired, id)
			delete(k.used, id)
			for _, c := range counters {
				if c.Kernel == kern {
					k.children[c.Metric.ID]--
				}
			}
		}
		delete(k.devs, key)
	}
	r.Metrics = append(r.Metrics, catalog.DeviceTree()...)
	r.Counters[catalog.DropsDevice] = 0
	for _, c := range counters {
		r.Counters[c.Metric.ID] = k.parent[c.Metric.ID]
		if c.Headline {
			r.Counters[catalog.DropsDevice] += k.parent[c.Metric.ID]
		}
	}
	for _, d := range k.devs {
		for _, c := range counters {
			if d.own[c.Kernel] == 0 {
				continue
			}
			id := d.ids[c.Kernel]
			if id == "" {
				id = c.Metric.ID + "/" + catalog.MetricSegment(d.name)
				if k.children[c.Metric.ID] >= MaxDevices || k.used[id] {
					continue // counted in the parent only
				}
				d.ids[c.Kernel], k.used[id] = id, true
				k.children[c.Metric.ID]++
			}
			r.Metrics = append(r.Metrics, catalog.DeviceChild(c.Metric, id[len(c.Metric.ID)+1:], d.name))
			r.Counters[id] = d.own[c.Kernel]
		}
	}
}

// isKernelCounter says whether id is under drops/conntrack or
// drops/device: the kernel's counters, read the same with or without BPF.
func isKernelCounter(id string) bool {
	switch {
	case id == catalog.DropsConntrack || strings.HasPrefix(id, catalog.DropsConntrack+"/"):
		return true
	case id == catalog.DropsDevice:
		return true
	case strings.HasPrefix(id, catalog.DropsDevice+"/"):
		return true
	}
	return false
}

// isDeviceChild says whether id is a device's child of a drops/device
// counter.
func isDeviceChild(id string) bool {
	return strings.HasPrefix(id, catalog.DropsDevice+"/") && strings.Count(id, "/") >= 3
}
