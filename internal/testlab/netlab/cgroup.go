package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/cgroupv2"
)

// Cgroup is a cgroup v2 directory made for one test.
type Cgroup struct {
	// Path is the directory; Rel is its path below the cgroup v2 root, as
	// /proc/PID/cgroup shows it ("/nbs-test-1a2b3c4d/...").
	Path, Rel string
	fd        int
}

// NewCgroup makes a cgroup under the root of the cgroup v2 hierarchy and
// removes it when the test ends, killing what the test left running in it
// (only the test's own processes can be there).
func NewCgroup(t testing.TB) *Cgroup {
	t.Helper()
	SkipShort(t)
	root, err := cgroupv2.Root()
	if err != nil {
		SkipOrFail(t, "netlab: %v", err)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "nbs-test-" + hex.EncodeToString(rnd[:])
	if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil {
		SkipOrFail(t, "netlab: make cgroup: %v", err)
	}
	return openCgroup(t, filepath.Join(root, name), "/"+name)
}

// Child makes the cgroups of rel ("kubepods.slice/kubepods-pod<uid>.slice/
// cri-containerd-<id>.scope") below c, each removed when the test ends
// (before c: cleanups run last first), and returns the deepest.
func (c *Cgroup) Child(t testing.TB, rel string) *Cgroup {
	t.Helper()
	cur := c
	for seg := range strings.SplitSeq(strings.Trim(rel, "/"), "/") {
		path := filepath.Join(cur.Path, seg)
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatalf("netlab: make cgroup %s: %v", path, err)
		}
		cur = openCgroup(t, path, cur.Rel+"/"+seg)
	}
	return cur
}

func openCgroup(t testing.TB, path, rel string) *Cgroup {
	t.Helper()
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(path)
		t.Fatalf("netlab: open cgroup %s: %v", path, err)
	}
	c := &Cgroup{Path: path, Rel: rel, fd: fd}
	t.Cleanup(func() { c.remove(t) })
	return c
}

func (c *Cgroup) remove(t testing.TB) {
	unix.Close(c.fd)
	_ = os.WriteFile(filepath.Join(c.Path, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(c.Path)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("netlab: remove cgroup %s: %v", c.Path, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Command returns a command that starts inside the cgroup (clone3 with
// CLONE_INTO_CGROUP, so not even its first instruction runs outside) and,
// through `ip netns exec`, inside network namespace ns (in the test's own
// namespace if ns is "").
func (c *Cgroup) Command(ns, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if ns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.fd}
	return cmd
}
