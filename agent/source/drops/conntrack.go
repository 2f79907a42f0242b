package drops

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
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
