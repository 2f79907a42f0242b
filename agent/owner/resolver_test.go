package owner

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/netns"
	"github.com/nbs-project/nbs/internal/netlab"
)

// holder is a `sleep` started for a test, holding a namespace.
type holder struct {
	cmd *exec.Cmd
}

func (h holder) pid() int { return h.cmd.Process.Pid }

// inode waits until the process has become `sleep` (it may still be the
// shell or unshare that sets it up) and returns its namespace inode.
func (h holder) inode(t *testing.T) uint32 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join("/proc", itoa(h.pid()), "comm"))
		if strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became sleep (comm %q)", h.pid(), b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ino, ok := nsInode(filepath.Join("/proc", itoa(h.pid()), "ns", "net"))
	if !ok {
		t.Fatalf("no netns for pid %d", h.pid())
	}
	return ino
}

func start(t *testing.T, cmd *exec.Cmd) holder {
	t.Helper()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return holder{cmd}
}

func randHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeBundle writes a containerd-style OCI bundle with the CRI plugin's
// annotations under dir/k8s.io/<id>/config.json.
func writeBundle(t *testing.T, dir, id, ns, pod, ctr string) {
	t.Helper()
	p := filepath.Join(dir, "k8s.io", id)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	js := `{"ociVersion":"1.1.0","annotations":{"io.kubernetes.cri.container-type":"container",` +
		`"io.kubernetes.cri.sandbox-namespace":"` + ns + `","io.kubernetes.cri.sandbox-name":"` + pod + `",` +
		`"io.kubernetes.cri.container-name":"` + ctr + `"}}`
	if err := os.WriteFile(filepath.Join(p, "config.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResolverLab names namespaces of every kind, from real processes in a
// synthetic cgroup tree laid out as the kubelet and runtimes lay it out.
func TestResolverLab(t *testing.T) {
	lab := netlab.New(t)
	cg := netlab.NewCgroup(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		netlab.SkipOrFail(t, "unshare (util-linux) not found: %v", err)
	}
	runtimeDir := t.TempDir()

	// A: a pod named by its runtime's bundle (systemd driver naming).
	uidA := randHex(8) + "-" + randHex(4) + "-" + randHex(4) + "-" + randHex(4) + "-" + randHex(12)
	idA := randHex(64)
	writeBundle(t, runtimeDir, idA, "shop", "cart-7d9f", "cart")
	scopeA := cg.Child(t, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+
		strings.ReplaceAll(uidA, "-", "_")+".slice/cri-containerd-"+idA+".scope")
	podA := start(t, scopeA.Command(lab.A, "sleep", "600"))

	// B: a pod without runtime files (cgroupfs driver naming): named from
	// HOSTNAME, its namespace from the service account file inside its own
	// mount namespace, reached through /var/run -> /run inside its root.
	uidB := randHex(8) + "-" + randHex(4) + "-" + randHex(4) + "-" + randHex(4) + "-" + randHex(12)
	idB := randHex(64)
	scopeB := cg.Child(t, "kubepods/besteffort/pod"+uidB+"/"+idB)
	cmdB := scopeB.Command(lab.B, "unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs nbs-test /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && `+
			`printf team-b > /run/secrets/kubernetes.io/serviceaccount/namespace && exec sleep 600`)
	cmdB.Env = append(os.Environ(), "HOSTNAME=web-2", "POD_NAME=", "POD_NAMESPACE=")
	podB := start(t, cmdB)

	// C: a docker container outside Kubernetes, in a namespace of its own.
	idC := randHex(64)
	scopeC := cg.Child(t, "system.slice/docker-"+idC+".scope")
	ctrC := start(t, scopeC.Command("", "unshare", "-n", "sleep", "600"))

	// D: a bare process holding a namespace; E: a named namespace nothing
	// runs in.
	procD := start(t, cg.Child(t, "plain").Command("", "unshare", "-n", "sleep", "600"))
	nameE := "nbsE-" + randHex(8)
	if out, err := exec.Command("ip", "netns", "add", nameE).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nameE).Run() })
	hE, err := netns.Resolve(nameE)
	if err != nil {
		t.Fatal(err)
	}
	host, ok := nsInode("/proc/1/ns/net")
	if !ok { // PID 1 unreadable (a sandbox): the resolver takes its own
		host, _ = nsInode("/proc/self/ns/net")
	}

	r := New(Options{RuntimeDirs: []string{runtimeDir}, RescanEvery: time.Millisecond})
	inoA, inoB, inoC, inoD := podA.inode(t), podB.inode(t), ctrC.inode(t), procD.inode(t)
	got := r.Lookup(inoA, inoB, inoC, inoD, hE.Inode, host, 0)
	want := map[uint32]Owner{
		inoA: {Kind: Pod, Inode: inoA, Pod: "shop/cart-7d9f", PodUID: uidA, ContainerID: idA, ContainerName: "cart",
			Runtime: "containerd", NetnsName: lab.A, PID: podA.pid(), Comm: "sleep"},
		inoB: {Kind: Pod, Inode: inoB, Pod: "team-b/web-2", PodUID: uidB, ContainerID: idB, NetnsName: lab.B,
			PID: podB.pid(), Comm: "sleep"},
		inoC:     {Kind: Container, Inode: inoC, ContainerID: idC, Runtime: "docker", PID: ctrC.pid(), Comm: "sleep"},
		inoD:     {Kind: Process, Inode: inoD, PID: procD.pid(), Comm: "sleep"},
		hE.Inode: {Kind: Netns, Inode: hE.Inode, NetnsName: nameE},
		host:     {Kind: Host, Inode: host},
		0:        {Kind: Unknown},
	}
	for ino, w := range want {
		if got[ino] != w {
			t.Errorf("inode %d:\n got %+v\nwant %+v", ino, got[ino], w)
		}
	}
	if id := got[inoA].ID(); id != "pod:shop.cart-7d9f" {
		t.Errorf("pod A id %q", id)
	}

	// Cached: no scan for what is known and fresh.
	scans := r.Scans()
	r.Lookup(inoA, inoB)
	if r.Scans() != scans {
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
	slow := New(Options{RescanEvery: time.Hour})
	slow.Lookup(1, 2)
	slow.Lookup(3)
	if n := slow.Scans(); n != 1 {
		t.Errorf("unknown inodes within RescanEvery: %d scans, want 1", n)
	}

	small := New(Options{MaxEntries: 3, RescanEvery: time.Nanosecond})
	for ino := uint32(1); ino <= 5; ino++ {
		small.Lookup(ino)
	}
	if n := small.Len(); n > 3 {
		t.Errorf("cache holds %d entries, bound 3", n)
	}

	p := start(t, exec.Command("unshare", "-n", "sleep", "600"))
	ino := p.inode(t)
	const grace = 300 * time.Millisecond
	r := New(Options{RescanEvery: time.Nanosecond, RefreshEvery: time.Nanosecond, Grace: grace})
	if o := r.Owner(ino); o.Kind != Process || o.PID != p.pid() {
		t.Fatalf("live: %+v", o)
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	gone := time.Now()
	if _, ok := nsInode(filepath.Join("/proc", itoa(p.pid()), "ns", "net")); ok {
		t.Fatalf("pid %d still holds its namespace", p.pid())
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
