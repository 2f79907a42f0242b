package drops

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
)

// The files of connection tracking, as seen from inside the watched
// namespace: /proc/sys/net is the namespace of the reading thread,
// /proc/thread-self/net too (not /proc/self, see netns.Handle.ReadFile).
const (
	ConntrackCountPath = "/proc/sys/net/netfilter/nf_conntrack_count"
	ConntrackMaxPath   = "/proc/sys/net/netfilter/nf_conntrack_max"
	// ConntrackBucketsPath is the hash table's size (the tests set it).
	ConntrackBucketsPath = "/proc/sys/net/netfilter/nf_conntrack_buckets"
	ConntrackStatPath    = "/proc/thread-self/net/stat/nf_conntrack"
)

// conntrack is one reading of the namespace's connection tracking.
type conntrack struct {
	count, max                    uint64
	drop, insertFailed, earlyDrop uint64 // summed over CPUs
}

// errNoConntrack says the namespace has no connection tracking: the module
// is not loaded (nothing to measure, not a failure).
var errNoConntrack = errors.New("nf_conntrack is not loaded (no /proc/sys/net/netfilter/nf_conntrack_count)")

// readConntrack reads the namespace's table size and statistics through
// read (already inside the namespace).
func readConntrack(read func(string) ([]byte, error)) (conntrack, error) {
	var c conntrack
	b, err := read(ConntrackCountPath)
	if errors.Is(err, fs.ErrNotExist) {
		return c, errNoConntrack
	}
	if err != nil {
		return c, fmt.Errorf("read conntrack count: %w", err)
	}
	if c.count, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return c, fmt.Errorf("parse %s: %w", ConntrackCountPath, err)
	}
	if b, err = read(ConntrackMaxPath); err != nil {
		return c, fmt.Errorf("read conntrack max: %w", err)
	}
	if c.max, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return c, fmt.Errorf("parse %s: %w", ConntrackMaxPath, err)
	}
	if b, err = read(ConntrackStatPath); err != nil {
		return c, fmt.Errorf("read conntrack statistics: %w", err)
	}
	cols, err := parseConntrackStat(b, "drop", "insert_failed", "early_drop")
	if err != nil {
		return c, err
	}
	c.drop, c.insertFailed, c.earlyDrop = cols[0], cols[1], cols[2]
	return c, nil
}

// parseConntrackStat sums the named columns of /proc/net/stat/nf_conntrack
// over its rows, one per possible CPU, in hex. Columns are found by the
// header's names: kernels have added and removed some.
func parseConntrackStat(b []byte, names ...string) ([]uint64, error) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("parse %s: %d lines, want a header and a row per CPU", ConntrackStatPath, len(lines))
	}
	head := strings.Fields(lines[0])
	idx := make([]int, len(names))
	for i, n := range names {
		idx[i] = -1
		for j, h := range head {
			if h == n {
				idx[i] = j
			}
		}
		if idx[i] < 0 {
			return nil, fmt.Errorf("parse %s: no column %q in %q", ConntrackStatPath, n, lines[0])
		}
	}
	sums := make([]uint64, len(names))
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != len(head) {
			return nil, fmt.Errorf("parse %s: row %q has %d fields, header %d", ConntrackStatPath, l, len(f), len(head))
		}
		for i, j := range idx {
			v, err := strconv.ParseUint(f[j], 16, 64)
			if err != nil {
				return nil, fmt.Errorf("parse %s: column %s: %w", ConntrackStatPath, names[i], err)
			}
			sums[i] += v
		}
	}
	return sums, nil
}

// link is one device's statistics.
type link struct {
	index int32
	name  string
	stats map[string]uint64 // by catalog.DeviceCounter.Kernel
}

// rtnl_link_stats64's fields in order (include/uapi/linux/if_link.h); a
// kernel may send more at the end, never fewer of these.
var stats64Fields = []string{
	"rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped",
	"multicast", "collisions", "rx_length_errors", "rx_over_errors", "rx_crc_errors", "rx_frame_errors",
	"rx_fifo_errors", "rx_missed_errors", "tx_aborted_errors", "tx_carrier_errors", "tx_fifo_errors",
	"tx_heartbeat_errors", "tx_window_errors",
}

// readLinks dumps the devices of the current thread's namespace with
// their IFLA_STATS64, as `ip -s -s link` does: one netlink request for
// every counter of every device. Call it inside the namespace.
func readLinks() ([]link, error) {
	b, err := syscall.NetlinkRIB(unix.RTM_GETLINK, unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("dump links: %w", err)
	}
	return parseLinks(b)
}

func parseLinks(b []byte) ([]link, error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil, fmt.Errorf("parse link dump: %w", err)
	}
	want := map[string]bool{}
	for _, c := range catalog.DeviceCounters() {
		want[c.Kernel] = true
	}
	var out []link
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		l := link{index: int32(binary.NativeEndian.Uint32(m.Data[4:8]))}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return nil, fmt.Errorf("parse attributes of link %d: %w", l.index, err)
		}
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.IFLA_IFNAME:
				l.name = string(bytes.TrimRight(a.Value, "\x00"))
			case unix.IFLA_STATS64:
				if len(a.Value) < 8*len(stats64Fields) {
					return nil, fmt.Errorf("link %d: IFLA_STATS64 of %d bytes, want %d", l.index, len(a.Value), 8*len(stats64Fields))
				}
				l.stats = make(map[string]uint64, len(want))
				for i, f := range stats64Fields {
					if want[f] {
						l.stats[f] = binary.NativeEndian.Uint64(a.Value[8*i:])
					}
				}
			}
		}
		if l.name != "" && l.stats != nil {
			out = append(out, l)
		}
	}
	return out, nil
}

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
