package owner

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// inodeOf returns the namespace inode of a process.
func inodeOf(t *testing.T, pid int) uint32 {
	t.Helper()
	ino, ok := nsInode(filepath.Join("/proc", itoa(pid), "ns", "net"))
	if !ok {
		t.Fatalf("no netns for pid %d", pid)
	}
	return ino
}

func newUID() string {
	return netlab.RandHex(8) + "-" + netlab.RandHex(4) + "-" + netlab.RandHex(4) + "-" + netlab.RandHex(4) + "-" + netlab.RandHex(12)
}

// TestResolverLab names namespaces of every kind, from real processes in a
// synthetic cgroup tree laid out as the kubelet and runtimes lay it out.
func TestResolverLab(t *testing.T) {
	lab := netlab.New(t)
	own := lab.Own(t)
	cg := netlab.NewCgroup(t)

	// A pod without runtime files (cgroupfs driver naming), in a namespace
	// of its own: named from HOSTNAME, its namespace from the service
	// account file inside its own mount namespace, reached through
	// /var/run -> /run inside its root.
	uidF, idF := newUID(), netlab.RandHex(64)
	cmdF := cg.Child(t, "kubepods/besteffort/pod"+uidF+"/"+idF).Command("", "unshare", "-n", "-m", "--propagation", "private",
		"sh", "-c", `mount -t tmpfs nbs-test /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && `+
			`printf team-b > /run/secrets/kubernetes.io/serviceaccount/namespace && exec sleep 600`)
	cmdF.Env = append(os.Environ(), "HOSTNAME=web-2", "POD_NAME=", "POD_NAMESPACE=")
	pidF := netlab.StartHolder(t, cmdF)

	// A docker container outside Kubernetes, in a namespace of its own.
	idC := netlab.RandHex(64)
	pidC := netlab.StartHolder(t, cg.Child(t, "system.slice/docker-"+idC+".scope").Command("", "unshare", "-n", "sleep", "600"))

	hB, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	host, ok := nsInode("/proc/1/ns/net")
	if !ok { // PID 1 unreadable (a sandbox): the resolver takes its own
		host, _ = nsInode("/proc/thread-self/ns/net")
	}

	r := New(Options{RuntimeDirs: []string{own.RuntimeDir}, RescanEvery: time.Millisecond})
	inoA, inoF, inoC := lab.Inode(t, lab.A), inodeOf(t, pidF), inodeOf(t, pidC)
	got := r.Lookup(inoA, inoF, inoC, own.Proc.Inode, hB.Inode, host, 0)
	want := map[uint32]Owner{
		inoA: {Kind: Pod, Inode: inoA, Pod: own.PodNamespace + "/" + own.PodName, PodUID: own.PodUID,
			ContainerID: own.ContainerID, ContainerName: "cart", Runtime: "containerd", NetnsName: lab.A,
			PID: own.PodPID, Comm: "sleep"},
		inoF:           {Kind: Pod, Inode: inoF, Pod: "team-b/web-2", PodUID: uidF, ContainerID: idF, PID: pidF, Comm: "sleep"},
		inoC:           {Kind: Container, Inode: inoC, ContainerID: idC, Runtime: "docker", PID: pidC, Comm: "sleep"},
		own.Proc.Inode: {Kind: Process, Inode: own.Proc.Inode, PID: own.ProcPID, Comm: "sleep"},
		hB.Inode:       {Kind: Netns, Inode: hB.Inode, NetnsName: lab.B},
		host:           {Kind: Host, Inode: host},
		0:              {Kind: Unknown},
	}
	for ino, w := range want {
		if got[ino] != w {
			t.Errorf("inode %d:\n got %+v\nwant %+v", ino, got[ino], w)
		}
	}
	if id, w := got[inoA].ID(), "pod:shop."+own.PodName; id != w {
		t.Errorf("pod id %q, want %q", id, w)
	}

	// Cached: no scan for what is known and fresh.
	scans, _ := r.Stats()
	r.Lookup(inoA, inoF)
	if n, _ := r.Stats(); n != scans {
		t.Errorf("a lookup of fresh entries scanned /proc")
	}
}

// TestResolverRefresh checks the cache's bounds: unknown inodes are retried
// at most every RescanEvery, a vanished namespace keeps its owner for Grace
// and is then forgotten, and the cache never holds more than MaxEntries.
func TestResolverRefresh(t *testing.T) {
	if os.Geteuid() != 0 {
		netlab.SkipOrFail(t, "needs root to make network namespaces")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		netlab.SkipOrFail(t, "unshare (util-linux) not found: %v", err)
	}
	slow := New(Options{RescanEvery: time.Hour, MinScanGap: 50 * time.Millisecond})
	slow.Lookup(1, 2)
	slow.Lookup(1)
	slow.Lookup(2, 1)
	if n, _ := slow.Stats(); n != 1 {
		t.Errorf("unknown inodes within RescanEvery: %d scans, want 1", n)
	}
	// A new inode is tried at once, after the gap since the last scan.
	t0 := time.Now()
	slow.Lookup(3)
	if n, _ := slow.Stats(); n != 2 || time.Since(t0) > time.Second {
		t.Errorf("new inode: %d scans in %v, want 2 within the gap", n, time.Since(t0))
	}

	small := New(Options{MaxEntries: 3, RescanEvery: time.Nanosecond})
	for ino := uint32(1); ino <= 5; ino++ {
		small.Lookup(ino)
	}
	if _, n := small.Stats(); n > 3 {
		t.Errorf("cache holds %d entries, bound 3", n)
	}

	cmd := exec.Command("unshare", "-n", "sleep", "600")
	pid := netlab.StartHolder(t, cmd)
	ino := inodeOf(t, pid)
	const grace = 300 * time.Millisecond
	r := New(Options{RescanEvery: time.Nanosecond, RefreshEvery: time.Nanosecond, Grace: grace})
	if o := r.Owner(ino); o.Kind != Process || o.PID != pid {
		t.Fatalf("live: %+v", o)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	gone := time.Now()
	if _, ok := nsInode(filepath.Join("/proc", itoa(pid), "ns", "net")); ok {
		t.Fatalf("pid %d still holds its namespace", pid)
	}
	if o := r.Owner(ino); o.Kind != Process && time.Since(gone) < grace {
		t.Errorf("within grace after it vanished: %+v", o)
	}
	time.Sleep(grace)
	if o := r.Owner(ino); o.Kind != Unknown {
		t.Errorf("after grace: %+v, want unknown", o)
	}
	r.Lookup(1) // a scan that does not want ino drops it
	if _, ok := r.entries[ino]; ok {
		t.Errorf("vanished namespace still cached")
	}
}

// Forget makes the next lookup resolve the inode anew.
func TestResolverForget(t *testing.T) {
	r := New(Options{Proc: t.TempDir(), NetnsDirs: []string{}, MinScanGap: time.Millisecond})
	r.Lookup(42)
	scans, entries := r.Stats()
	r.Lookup(42) // cached (unknown, rescanned at most every RescanEvery)
	if s, _ := r.Stats(); s != scans || entries != 1 {
		t.Fatalf("a cached lookup scanned (%d scans, was %d) or entries %d", s, scans, entries)
	}
	r.Forget(42)
	if _, n := r.Stats(); n != 0 {
		t.Fatalf("%d entries after Forget", n)
	}
	r.Lookup(42)
	if s, _ := r.Stats(); s != scans+1 {
		t.Errorf("%d scans after Forget and a lookup, want %d", s, scans+1)
	}
}

// One walk of /proc lists the namespaces and serves the lookup of their
// owners that follows; an inode it did not find is walked for anew.
func TestNamespacesServeTheLookupThatFollows(t *testing.T) {
	if os.Geteuid() != 0 {
		netlab.SkipOrFail(t, "needs root to make network namespaces")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		netlab.SkipOrFail(t, "unshare (util-linux) not found: %v", err)
	}
	cmd := exec.Command("unshare", "-n", "sleep", "600")
	pid := netlab.StartHolder(t, cmd)
	ino := inodeOf(t, pid)
	dir := t.TempDir()
	named := filepath.Join(dir, "named")
	if err := os.WriteFile(named, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A bind mount of the holder's namespace, as `ip netns add` makes.
	if out, err := exec.Command("mount", "--bind", filepath.Join("/proc", itoa(pid), "ns", "net"), named).CombinedOutput(); err != nil {
		t.Fatalf("bind-mount the namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", named).Run() })

	r := New(Options{NetnsDirs: []string{dir}})
	all := r.Namespaces()
	if all[ino] != named {
		t.Errorf("path of the named namespace: %q, want its bind mount %q", all[ino], named)
	}
	own, _ := nsInode("/proc/thread-self/ns/net")
	if p := all[own]; p == "" || statIno(p) != own {
		t.Errorf("path of this process's namespace %d: %q, which is not it", own, p)
	}
	if o := r.Owner(ino); o.Kind != Netns || o.NetnsName != "named" {
		t.Errorf("owner: %+v, want the namespace named \"named\"", o)
	}
	if n := r.Walks(); n != 1 {
		t.Errorf("namespaces then their owners: %d walks of /proc, want 1", n)
	}
	r.Lookup(1) // found by no walk: one of its own
	if n := r.Walks(); n != 2 {
		t.Errorf("an inode the walk did not find: %d walks in all, want 2", n)
	}
}

// TestNsInode reads namespace links as the kernel writes them, and refuses
// anything else rather than guess an inode.
func TestNsInode(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		target string
		ino    uint32
		ok     bool
	}{
		{"net:[4026531840]", 4026531840, true},
		{"net:[1]", 1, true},
		{"net:[4294967295]", 4294967295, true},
		{"net:[4294967296]", 0, false}, // beyond 32 bits
		{"net:[]", 0, false},
		{"net:[12a]", 0, false},
		{"net:[12", 0, false},
		{"mnt:[4026531840]", 0, false},
		{"net:[40265318400000000000000000000]", 0, false}, // longer than the buffer
	} {
		link := filepath.Join(dir, "l")
		_ = os.Remove(link)
		if err := os.Symlink(c.target, link); err != nil {
			t.Fatal(err)
		}
		ino, ok := nsInode(link)
		if ino != c.ino || ok != c.ok {
			t.Errorf("nsInode(-> %q) = %d, %v; want %d, %v", c.target, ino, ok, c.ino, c.ok)
		}
	}
	if _, ok := nsInode(filepath.Join(dir, "missing")); ok {
		t.Error("nsInode of a missing link: ok")
	}
}

// TestNamespacesWalkOnlyOnChange: Namespaces keeps the last walk's index
// while no task was made or ended and no netns directory changed, and walks
// again when one of them did, when the index is maxUnchanged old, and
// every time where the signal cannot be read.
func TestNamespacesWalkOnlyOnChange(t *testing.T) {
	proc, names := t.TempDir(), t.TempDir()
	loadavg := func(tasks, last int) {
		t.Helper()
		s := "0.00 0.01 0.05 1/" + itoa(tasks) + " " + itoa(last) + "\n"
		if err := os.WriteFile(filepath.Join(proc, "loadavg"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	process := func(pid int, ino string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, itoa(pid), "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("net:["+ino+"]", filepath.Join(proc, itoa(pid), "ns", "net")); err != nil {
			t.Fatal(err)
		}
	}
	loadavg(100, 500)
	process(10, "111")
	r := New(Options{Proc: proc, NetnsDirs: []string{names}})
	steps := []struct {
		name   string
		change func()
		walks  uint64
		inodes []uint32
	}{
		{"first", func() {}, 1, []uint32{111}},
		{"nothing changed", func() {}, 1, []uint32{111}},
		// Not what a kernel does (a process comes with a new PID), which
		// shows the index is kept.
		{"a process the signal does not show", func() { process(20, "222") }, 1, []uint32{111}},
		{"a task made", func() { loadavg(101, 501) }, 2, []uint32{111, 222}},
		{"a task ended", func() { loadavg(100, 501) }, 3, []uint32{111, 222}},
		{"a name added", func() {
			time.Sleep(20 * time.Millisecond) // past the directory's last timestamp tick
			if err := os.WriteFile(filepath.Join(names, "x"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, 4, nil},
		{"index too old", func() { r.idx.walked = r.idx.walked.Add(-maxUnchanged) }, 5, nil},
		{"no signal", func() { _ = os.Remove(filepath.Join(proc, "loadavg")) }, 6, nil},
		{"still no signal", func() {}, 7, nil},
	}
	for _, s := range steps {
		s.change()
		got := r.Namespaces()
		if n := r.Walks(); n != s.walks {
			t.Errorf("%s: %d walks, want %d", s.name, n, s.walks)
		}
		for _, ino := range s.inodes {
			if got[ino] == "" {
				t.Errorf("%s: namespace %d not found: %v", s.name, ino, got)
			}
		}
		if s.inodes != nil && len(got) != len(s.inodes) {
			t.Errorf("%s: namespaces %v, want %v", s.name, got, s.inodes)
		}
	}
}

// A walk reads the namespace link only of processes it has not seen and of
// PIDs given out since the last walk began; the others keep what the last
// walk read, until the PIDs wrap around or the index is maxUnchanged old.
// Links changed in place (which a kernel does only for setns or unshare)
// show what was read.
func TestWalkReadsOnlyNewProcesses(t *testing.T) {
	proc := t.TempDir()
	if err := os.Symlink(itoa(os.Getpid()), filepath.Join(proc, "self")); err != nil {
		t.Fatal(err)
	}
	tasks := 100
	loadavg := func(last int) {
		t.Helper()
		tasks++ // a task made or ended: a walk is due
		s := "0.00 0.01 0.05 1/" + itoa(tasks) + " " + itoa(last) + "\n"
		if err := os.WriteFile(filepath.Join(proc, "loadavg"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	process := func(pid int, ino string) {
		t.Helper()
		dir := filepath.Join(proc, itoa(pid), "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(filepath.Join(dir, "net"))
		if err := os.Symlink("net:["+ino+"]", filepath.Join(dir, "net")); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(pid int) {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(proc, itoa(pid))); err != nil {
			t.Fatal(err)
		}
	}
	loadavg(500)
	process(10, "111")
	process(520, "222") // above the last PID: from before a wrap
	r := New(Options{Proc: proc, NetnsDirs: []string{t.TempDir()}})
	steps := []struct {
		name   string
		change func()
		want   []uint32
	}{
		{"first", func() {}, []uint32{111, 222}},
		{"a process made, one moved in place", func() {
			process(501, "333")
			process(10, "444")
			loadavg(501)
		}, []uint32{111, 222, 333}},
		{"a PID above the last given out again", func() {
			process(520, "555")
			loadavg(530)
		}, []uint32{111, 333, 555}},
		{"a process gone", func() { gone(501); loadavg(530) }, []uint32{111, 555}},
		{"PIDs wrapped", func() { loadavg(7) }, []uint32{444, 555}},
		{"moved in place, index too old", func() {
			process(10, "666")
			loadavg(8)
			r.idx.walked = r.idx.walked.Add(-maxUnchanged)
			r.procs.full = r.procs.full.Add(-maxUnchanged)
		}, []uint32{555, 666}},
	}
	for _, s := range steps {
		s.change()
		got := slices.Sorted(maps.Keys(r.Namespaces()))
		if !slices.Equal(got, s.want) {
			t.Errorf("%s: namespaces %v, want %v", s.name, got, s.want)
		}
	}
}
