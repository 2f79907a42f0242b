package owner

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults for Options left zero.
const (
	DefaultMaxEntries   = 4096
	DefaultRescanEvery  = 2 * time.Second
	DefaultRefreshEvery = 30 * time.Second
	DefaultGrace        = 2 * time.Minute
	DefaultMinScanGap   = 100 * time.Millisecond
)

// indexReuse is how old a walk of /proc (Namespaces' or a lookup's) may be
// and still serve a lookup of inodes it found, instead of a walk of its
// own: the flows source lists the namespaces, then looks up their owners,
// and one walk serves both (two were 13% of an idle agent's CPU,
// bench/agentcost BenchmarkAgentIdle). Never longer than RescanEvery, the
// staleness a lookup accepts anyway.
const indexReuse = time.Second

// pidsPerNetns is how many of a namespace's lowest PIDs are looked at for a
// pod or container cgroup: the first is usually the sandbox's pause process
// or the container's init, so a few suffice.
const pidsPerNetns = 4

// Options configure New.
type Options struct {
	// Proc is /proc unless set.
	Proc string
	// NetnsDirs hold `ip netns` bind mounts; /run/netns unless set.
	NetnsDirs []string
	// RuntimeDirs are searched for OCI bundles, in order; DefaultRuntimeDirs()
	// unless set.
	RuntimeDirs []string
	// MaxEntries bounds the cache; the least recently used entry goes first.
	MaxEntries int
	// RescanEvery is how often an inode a scan could not name is tried
	// again, at most.
	RescanEvery time.Duration
	// MinScanGap is the least time between any two scans: a lookup of an
	// inode never tried before waits for it, then scans, so a namespace
	// is named as soon as it is first counted, yet a storm of new
	// namespaces costs at most one scan per gap.
	MinScanGap time.Duration
	// RefreshEvery is how old a known owner may get before a lookup
	// resolves it again (a namespace inode can be reused by a new one).
	RefreshEvery time.Duration
	// Grace keeps the owner of a namespace that vanished this long, for
	// counts and events read after it went.
	Grace  time.Duration
	Logger *slog.Logger
}

// Resolver names the owners of network namespaces, with a bounded cache.
// It is safe for concurrent use; a lookup that needs a scan of /proc holds
// the others for its duration (about 9 ms per thousand processes,
// BENCHMARKS.md, plus at most MinScanGap).
type Resolver struct {
	opts Options

	mu       sync.Mutex
	entries  map[uint32]*entry
	lastScan time.Time
	scans    uint64
	walks    uint64
	idx      index // the last walk's
	procs    procTable
}

// procTable is every process's network namespace as the walks found it,
// kept so that a walk reads the namespace link only of the processes made
// since the last one (see indexProcs): on a busy node a walk is due nearly
// every collection (tasks come and go), and a link read per process was most
// of an idle agent's walk.
type procTable struct {
	ns, spare map[int]uint32 // by PID; 0: unreadable (a kernel thread's)
	// lastPID is the last PID given out as the walk that made ns began:
	// every PID in ns up to it was given out before the walk's readdir.
	lastPID uint64
	full    time.Time // the last walk that read every link
	// samePIDNS is set when Proc is a /proc of the agent's own PID
	// namespace, whose last PID /proc/loadavg shows.
	samePIDNS, checked bool
}

// index is what one walk of /proc and the netns directories found.
type index struct {
	// at is when it was last known current: its walk, or a refresh that
	// found nothing changed since (walked).
	at, walked time.Time
	sig        taskSignal // as the walk began
	sigOK      bool
	pids       map[uint32][]int // each namespace's lowest PIDs, ascending
	host       uint32
	names      map[uint32]string // `ip netns` names
	paths      map[uint32]string // the names' bind mounts
}

// holds says whether the index found every inode of inodes (0 aside).
func (x *index) holds(inodes []uint32) bool {
	for _, ino := range inodes {
		if ino != 0 && len(x.pids[ino]) == 0 && x.names[ino] == "" {
			return false
		}
	}
	return true
}

type entry struct {
	owner    Owner
	resolved time.Time // when owner was last worked out
	seen     time.Time // last scan that found the namespace alive (zero: never)
	used     time.Time // last lookup
}

// New returns a resolver; it reads nothing until the first lookup.
func New(opts Options) *Resolver {
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	if opts.NetnsDirs == nil {
		opts.NetnsDirs = []string{"/run/netns"}
	}
	if opts.RuntimeDirs == nil {
		opts.RuntimeDirs = DefaultRuntimeDirs()
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.RescanEvery <= 0 {
		opts.RescanEvery = DefaultRescanEvery
	}
	if opts.RefreshEvery <= 0 {
		opts.RefreshEvery = DefaultRefreshEvery
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.MinScanGap <= 0 {
		opts.MinScanGap = DefaultMinScanGap
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Resolver{opts: opts, entries: map[uint32]*entry{}}
}

// Owner returns the owner of one namespace inode (see Lookup).
func (r *Resolver) Owner(inode uint32) Owner { return r.Lookup(inode)[inode] }

// Lookup returns the owners of namespace inodes. An inode never tried
// makes it scan /proc (waiting out MinScanGap since the last scan); one a
// scan could not name, or named longer than RefreshEvery ago, makes it
// scan if the last scan is RescanEvery old. An inode it cannot name (gone
// before it was ever seen, or 0) is Unknown.
func (r *Resolver) Lookup(inodes ...uint32) map[uint32]Owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	scan, fresh := false, false
	for _, ino := range inodes {
		e := r.entries[ino]
		switch {
		case ino == 0:
		case e == nil:
			scan, fresh = true, true
		case e.owner.Kind == Unknown || now.Sub(e.resolved) >= r.opts.RefreshEvery:
			scan = scan || now.Sub(r.lastScan) >= r.opts.RescanEvery
		}
	}
	if scan {
		// A walk that just found every inode asked about serves: what
		// the wait below guards against is a storm of walks, not a
		// stale name.
		if now.Sub(r.idx.at) >= min(indexReuse, r.opts.RescanEvery) || !r.idx.holds(inodes) {
			if fresh {
				if wait := r.opts.MinScanGap - now.Sub(r.lastScan); wait > 0 {
					time.Sleep(wait)
					now = time.Now()
				}
			}
			if r.idx.holds(inodes) {
				r.refresh(now)
			} else {
				r.walk(now)
			}
		}
		r.scan(inodes, now)
	}
	out := make(map[uint32]Owner, len(inodes))
	for _, ino := range inodes {
		e := r.entries[ino]
		if e == nil {
			out[ino] = Owner{Kind: Unknown, Inode: ino}
			continue
		}
		e.used = now
		out[ino] = e.owner
	}
	return out
}

// Forget drops what the resolver knows of namespace inodes, so the next
// lookup of each resolves it anew: for a caller that saw a new namespace
// take the inode of one that went (the kernel reuses them), which a lookup
// would otherwise name by the old owner until RefreshEvery.
func (r *Resolver) Forget(inodes ...uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ino := range inodes {
		delete(r.entries, ino)
	}
}

// Stats returns how many times the resolver has scanned /proc and how many
// namespaces it holds.
func (r *Resolver) Stats() (scans uint64, entries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scans, len(r.entries)
}

// Walks returns how many times the resolver has walked /proc (Namespaces,
// and lookups no recent walk could serve).
func (r *Resolver) Walks() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.walks
}

// Namespaces walks /proc and the netns directories now and returns every
// network namespace a process is in or an `ip netns` name holds, by inode,
// with a path to enter it by: the name's bind mount, else the lowest PID's
// /proc/PID/ns/net. A lookup of the inodes it found, within indexReuse,
// resolves from this walk instead of walking again.
func (r *Resolver) Namespaces() map[uint32]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh(time.Now())
	out := make(map[uint32]string, len(r.idx.pids)+len(r.idx.paths))
	for ino, p := range r.idx.paths {
		out[ino] = p
	}
	for ino, pids := range r.idx.pids {
		if _, ok := out[ino]; !ok && len(pids) > 0 {
			out[ino] = filepath.Join(r.opts.Proc, strconv.Itoa(pids[0]), "ns", "net")
		}
	}
	return out
}

// walk indexes every process's namespace and the named namespaces.
func (r *Resolver) walk(now time.Time) {
	r.walks++
	sig, ok := r.signal()
	r.idx.pids, r.idx.host = r.indexProcs(now, sig, ok)
	r.idx.names, r.idx.paths = r.indexNames()
	r.idx.at, r.idx.walked = now, now
	r.idx.sig, r.idx.sigOK = sig, ok
}

// maxUnchanged is how long refresh keeps a walk's index while nothing says
// the namespaces changed, and how long a walk takes a process's namespace
// from the last one (indexProcs): a process that enters another namespace
// in place (setns or unshare, rare: runtimes do it in a child they make) is
// found within it.
const maxUnchanged = 30 * time.Second

// refresh walks unless nothing has changed since the last walk that a walk
// could find: no task was made and none ended (the kernel's count of tasks
// and the last PID it gave out, in /proc/loadavg), and no netns directory
// changed (`ip netns add` and del). An idle node's collections then read
// one small file instead of a link per process and a stat per name (most
// of an idle agent's system calls, bench/agentcost BenchmarkAgentIdle).
func (r *Resolver) refresh(now time.Time) {
	if r.idx.sigOK && now.Sub(r.idx.walked) < maxUnchanged {
		if sig, ok := r.signal(); ok && sig.equal(r.idx.sig) {
			r.idx.at = now // what a walk would find now
			return
		}
	}
	r.walk(now)
}

// taskSignal is what changes whenever a walk could find something new.
type taskSignal struct {
	tasks, lastPID uint64
	dirs           []int64 // the netns directories' modification times (ns; -1: none)
}

func (s taskSignal) equal(o taskSignal) bool {
	return s.tasks == o.tasks && s.lastPID == o.lastPID && slices.Equal(s.dirs, o.dirs)
}

// signal reads the taskSignal; false when it cannot (no /proc/loadavg
// where Proc points: a walk each time).
func (r *Resolver) signal() (taskSignal, bool) {
	var sig taskSignal
	fd, err := unix.Open(r.opts.Proc+"/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return sig, false
	}
	var buf [128]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return sig, false
	}
	// "0.00 0.01 0.05 1/123 4567": runnable/total tasks, the last PID.
	f := strings.Fields(string(buf[:n]))
	if len(f) < 5 {
		return sig, false
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return sig, false
	}
	if sig.tasks, err = strconv.ParseUint(total, 10, 64); err != nil {
		return sig, false
	}
	if sig.lastPID, err = strconv.ParseUint(f[4], 10, 64); err != nil {
		return sig, false
	}
	for _, dir := range r.opts.NetnsDirs {
		var st unix.Stat_t
		m := int64(-1)
		if unix.Stat(dir, &st) == nil {
			m = st.Mtim.Nano()
		}
		sig.dirs = append(sig.dirs, m)
	}
	return sig, true
}

// scan resolves, from the last walk, the wanted inodes and the cached ones
// that are unknown or due a refresh: a cached namespace that vanished is
// kept for Grace if it had been named, dropped otherwise.
func (r *Resolver) scan(wanted []uint32, now time.Time) {
	r.lastScan = now
	r.scans++
	pids, host, names := r.idx.pids, r.idx.host, r.idx.names
	todo := make(map[uint32]bool, len(wanted)+len(r.entries))
	for _, ino := range wanted {
		if ino != 0 {
			todo[ino] = true
		}
	}
	for ino := range r.entries {
		todo[ino] = true
	}
	for ino := range todo {
		e := r.entries[ino]
		if len(pids[ino]) == 0 && names[ino] == "" {
			switch {
			case e == nil:
				e = &entry{owner: Owner{Kind: Unknown, Inode: ino}, used: now}
				r.entries[ino] = e
			case e.owner.Kind != Unknown && now.Sub(e.seen) < r.opts.Grace:
				continue
			case !slices.Contains(wanted, ino):
				delete(r.entries, ino)
				continue
			default:
				e.owner = Owner{Kind: Unknown, Inode: ino}
			}
			e.resolved = now
			continue
		}
		if e != nil && e.owner.Kind != Unknown && now.Sub(e.resolved) < r.opts.RefreshEvery {
			e.seen = now // named recently: no need to read its processes again
			continue
		}
		o := r.resolve(ino, host, pids[ino], names[ino])
		if e == nil {
			e = &entry{used: now}
			r.entries[ino] = e
		}
		e.owner, e.resolved, e.seen = o, now, now
	}
	r.evict()
}

// evict bounds the cache, least recently used first.
func (r *Resolver) evict() {
	over := len(r.entries) - r.opts.MaxEntries
	if over <= 0 {
		return
	}
	type aged struct {
		ino  uint32
		used time.Time
	}
	all := make([]aged, 0, len(r.entries))
	for ino, e := range r.entries {
		all = append(all, aged{ino, e.used})
	}
	slices.SortFunc(all, func(a, b aged) int { return a.used.Compare(b.used) })
	for _, a := range all[:over] {
		delete(r.entries, a.ino)
	}
}

// indexProcs maps each namespace inode to its lowest PIDs, ascending, and
// returns the host's namespace: PID 1's, or where PID 1 cannot be read, the
// agent's own (it runs in the host's, hostNetwork on Kubernetes). The
// calling thread's, not /proc/self's: that is the main thread's, which
// netns.Handle.Do may have moved into another namespace for a moment.
//
// A process keeps the namespace it had at the last walk unless it moved
// (setns or unshare in place, rare: every maxUnchanged a walk reads every
// link), and its PID names it until the kernel gives the PID out again,
// which it does only after wrapping around: PIDs are given out upwards from
// the last one (/proc/loadavg's). So a walk reads the link of a PID the
// last walk did not find, or above the last PID as it began (given out
// since, perhaps again), and takes the others' namespaces from the last
// walk; when the last PID went down (wrapped), it reads every link.
func (r *Resolver) indexProcs(now time.Time, sig taskSignal, sigOK bool) (map[uint32][]int, uint32) {
	t := &r.procs
	if !t.checked {
		// /proc/loadavg shows the reader's PID namespace's last PID: of use
		// only when Proc shows the same one.
		t.checked = true
		self, err := os.Readlink(filepath.Join(r.opts.Proc, "self"))
		t.samePIDNS = err == nil && self == strconv.Itoa(os.Getpid())
	}
	reuse := t.samePIDNS && sigOK && t.ns != nil && sig.lastPID >= t.lastPID && now.Sub(t.full) < maxUnchanged
	d, err := os.Open(r.opts.Proc)
	if err != nil {
		r.opts.Logger.Warn("owner: read /proc", "err", err)
		return nil, 0
	}
	defer d.Close()
	ents, err := d.Readdirnames(-1)
	if err != nil {
		r.opts.Logger.Warn("owner: read /proc", "err", err)
	}
	idx := map[uint32][]int{}
	var host uint32
	if t.spare == nil {
		t.spare = make(map[int]uint32, len(ents))
	}
	next := t.spare
	clear(next)
	for _, n := range ents {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		ino, known := t.ns[pid]
		if !reuse || !known || uint64(pid) > t.lastPID {
			ino, _ = nsInode(r.opts.Proc + "/" + n + "/ns/net")
		}
		next[pid] = ino
		if ino == 0 {
			continue // gone, or a kernel thread's unreadable link
		}
		if pid == 1 {
			host = ino
		}
		ps := idx[ino]
		if len(ps) < pidsPerNetns || pid < ps[len(ps)-1] {
			i, _ := slices.BinarySearch(ps, pid)
			ps = slices.Insert(ps, i, pid)
			if len(ps) > pidsPerNetns {
				ps = ps[:pidsPerNetns]
			}
			idx[ino] = ps
		}
	}
	if host == 0 {
		host, _ = nsInode(filepath.Join(r.opts.Proc, "thread-self", "ns", "net"))
	}
	if sigOK && t.samePIDNS {
		t.ns, t.spare, t.lastPID = next, t.ns, sig.lastPID
	} else {
		// Nothing tells a PID given out again: every link next time.
		t.ns, t.spare, t.lastPID = nil, next, 0
	}
	if !reuse {
		t.full = now
	}
	return idx, host
}

// nsInode reads a namespace link ("net:[4026531840]"). It is read into a
// buffer on the stack and parsed in place: a walk reads one per process,
// and os.Readlink's buffer and string were a third of the walk's garbage.
func nsInode(link string) (uint32, bool) {
	var buf [32]byte
	n, err := unix.Readlink(link, buf[:])
	if err != nil || n >= len(buf) {
		return 0, false
	}
	b, ok := bytes.CutPrefix(buf[:n], []byte("net:["))
	if !ok {
		return 0, false
	}
	b, ok = bytes.CutSuffix(b, []byte("]"))
	if !ok || len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v = v*10 + uint64(c-'0'); v > math.MaxUint32 {
			return 0, false
		}
	}
	return uint32(v), true
}

// indexNames maps the inodes of the bind mounts `ip netns add` makes to
// their names, and to the mounts' paths.
func (r *Resolver) indexNames() (names, paths map[uint32]string) {
	names, paths = map[uint32]string{}, map[uint32]string{}
	for _, dir := range r.opts.NetnsDirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // no named namespaces on this node
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if ino := statIno(p); ino != 0 && names[ino] == "" {
				names[ino], paths[ino] = e.Name(), p
			}
		}
	}
	return names, paths
}

// resolve names one live namespace from its lowest PIDs and its name.
func (r *Resolver) resolve(ino, host uint32, pids []int, name string) Owner {
	if ino == host && host != 0 {
		return Owner{Kind: Host, Inode: ino}
	}
	name = clean(name, maxName)
	var ctr *Owner
	for _, pid := range pids {
		c, ok := r.cgroup(pid)
		if !ok {
			continue
		}
		comm := r.comm(pid)
		switch {
		case c.PodUID != "":
			return r.pod(ino, pid, comm, c, pids, name)
		case c.ContainerID != "" && ctr == nil:
			o := Owner{Kind: Container, Inode: ino, ContainerID: c.ContainerID, Runtime: c.Runtime, NetnsName: name, PID: pid, Comm: comm}
			if m, ok := bundleMeta(r.opts.RuntimeDirs, c.ContainerID); ok {
				o.ContainerName = clean(m.Container, maxName)
			}
			ctr = &o
		}
	}
	switch {
	case ctr != nil:
		return *ctr
	case name != "":
		return Owner{Kind: Netns, Inode: ino, NetnsName: name}
	case len(pids) > 0:
		return Owner{Kind: Process, Inode: ino, PID: pids[0], Comm: r.comm(pids[0])}
	}
	return Owner{Kind: Unknown, Inode: ino}
}

// pod names the pod of a process in a kubepods cgroup. The container named
// is that of the lowest-PID process that is not the sandbox's pause
// process, since every container of the pod shares the namespace.
func (r *Resolver) pod(ino uint32, pid int, comm string, c cgroupInfo, pids []int, name string) Owner {
	o := Owner{Kind: Pod, Inode: ino, PodUID: c.PodUID, ContainerID: c.ContainerID, Runtime: c.Runtime,
		NetnsName: name, PID: pid, Comm: comm}
	if comm == "pause" {
		for _, p := range pids {
			if p == pid {
				continue
			}
			if pc, ok := r.cgroup(p); ok && pc.PodUID == c.PodUID && pc.ContainerID != "" {
				o.ContainerID, o.Runtime, o.PID, o.Comm = pc.ContainerID, pc.Runtime, p, r.comm(p)
				break
			}
		}
	}
	m, ok := bundleMeta(r.opts.RuntimeDirs, o.ContainerID)
	if !ok || m.Name == "" || m.Namespace == "" {
		pm := processMeta(r.opts.Proc, o.PID)
		if m.Name == "" {
			m.Name = pm.Name
		}
		if m.Namespace == "" {
			m.Namespace = pm.Namespace
		}
	}
	o.ContainerName = clean(m.Container, maxName)
	o.Pod = m.pod()
	return o
}

// cgroup is what the cgroup v2 path of a process says of it.
func (r *Resolver) cgroup(pid int) (cgroupInfo, bool) {
	b, err := readLimited(filepath.Join(r.opts.Proc, itoa(pid), "cgroup"))
	if err != nil {
		return cgroupInfo{}, false
	}
	path, ok := cgroupV2Path(string(b))
	if !ok {
		return cgroupInfo{}, false
	}
	return parseCgroup(path), true
}

func (r *Resolver) comm(pid int) string {
	b, err := readLimited(filepath.Join(r.opts.Proc, itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return clean(strings.TrimSuffix(string(b), "\n"), maxComm)
}

func itoa(i int) string { return strconv.Itoa(i) }

// statIno is the inode of a namespace file, 0 if it is not one.
func statIno(path string) uint32 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return uint32(st.Ino)
}
