package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/netns"
)

// Owned gives the lab's namespaces owners of every kind the agent tells
// apart (agent/owner), without Kubernetes: A is a pod's (a `sleep` in a
// cgroup laid out as the kubelet's systemd driver lays it out, with a
// containerd bundle naming it in RuntimeDir), B has only its `ip netns`
// name, and Proc is a third namespace only a process holds.
type Owned struct {
	// RuntimeDir holds the pod's OCI bundle; give it to the resolver.
	RuntimeDir string
	// PodNamespace/PodName is the pod's name, PodUID and ContainerID its
	// cgroup's.
	PodNamespace, PodName, PodUID, ContainerID string
	// PodPID and ProcPID are the processes holding A and Proc.
	PodPID, ProcPID int
	// Proc is the namespace only ProcPID holds (lo up, nothing else).
	Proc netns.Handle
}

// Own sets up the owners; everything goes when the test ends.
func (l *Lab) Own(t testing.TB) *Owned {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		SkipOrFail(t, "netlab: unshare (util-linux) not found: %v", err)
	}
	o := &Owned{RuntimeDir: t.TempDir(), PodNamespace: "shop", PodName: "cart-" + RandHex(4),
		PodUID:      RandHex(8) + "-" + RandHex(4) + "-" + RandHex(4) + "-" + RandHex(4) + "-" + RandHex(12),
		ContainerID: RandHex(64)}
	WriteBundle(t, o.RuntimeDir, o.ContainerID, o.PodNamespace, o.PodName, "cart")
	cg := NewCgroup(t)
	scope := cg.Child(t, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+
		strings.ReplaceAll(o.PodUID, "-", "_")+".slice/cri-containerd-"+o.ContainerID+".scope")
	o.PodPID = startHolder(t, scope.Command(l.A, "sleep", "600"))
	o.ProcPID = startHolder(t, exec.Command("unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep 600"))
	h, err := netns.Resolve("/proc/" + strconv.Itoa(o.ProcPID) + "/ns/net")
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	o.Proc = h
	return o
}

// WriteBundle writes a containerd-style OCI bundle with the CRI plugin's
// annotations, dir/k8s.io/<id>/config.json, as containerd keeps one per
// container under /run/containerd/io.containerd.runtime.v2.task.
func WriteBundle(t testing.TB, dir, id, namespace, pod, container string) {
	t.Helper()
	p := filepath.Join(dir, "k8s.io", id)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	js := `{"ociVersion":"1.1.0","annotations":{"io.kubernetes.cri.container-type":"container",` +
		`"io.kubernetes.cri.sandbox-namespace":"` + namespace + `","io.kubernetes.cri.sandbox-name":"` + pod + `",` +
		`"io.kubernetes.cri.container-name":"` + container + `"}}`
	if err := os.WriteFile(filepath.Join(p, "config.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
}

// StartHolder starts cmd (a command that ends up as `sleep`, holding a
// namespace), kills it when the test ends, and returns its PID once it is
// `sleep`, set up.
func StartHolder(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	return startHolder(t, cmd)
}

func startHolder(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("netlab: start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if strings.TrimSpace(string(b)) == "sleep" {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("netlab: %v never became sleep (comm %q): %s", cmd.Args, b, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RandHex returns n random hex digits, for names a test makes up.
func RandHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
