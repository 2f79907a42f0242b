package netlab

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BPFFS mounts a bpffs of the test's own on a temporary directory and
// returns it: pins made there cannot meet another test's (engineers and CI
// run tests in parallel), and the machine's /sys/fs/bpf is left alone.
// Unmounting it when the test ends drops every pin, so programs pinned
// there stop. It skips (or fails under NBS_REQUIRE_BPF=1) where bpffs
// cannot be mounted.
func BPFFS(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		SkipOrFail(t, "mount bpffs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount bpffs %s: %v", dir, err)
		}
	})
	return dir
}
