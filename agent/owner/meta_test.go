package owner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The default runtime directories fall back from PID 1's root to the
// agent's own, each runtime in both places, PID 1's first.
func TestDefaultRuntimeDirsFallBack(t *testing.T) {
	dirs := DefaultRuntimeDirs()
	for _, d := range runtimeDirs {
		viaPID1 := strings.Index(strings.Join(dirs, "\n")+"\n", "/proc/1/root"+d+"\n")
		own := strings.Index("\n"+strings.Join(dirs, "\n")+"\n", "\n"+d+"\n")
		if viaPID1 < 0 || own < 0 || own < viaPID1 {
			t.Errorf("%s: defaults %v must hold it through /proc/1/root, then as is", d, dirs)
		}
	}
}

// BundleAccess tells a readable runtime directory from one that exists but
// cannot be read (and says how to fix it) and from none at all, and reads
// a bundle through the fallback when the first directory is unreadable.
func TestBundleAccess(t *testing.T) {
	tmp := t.TempDir()
	readable := filepath.Join(tmp, "run", "containerd")
	ctr := filepath.Join(readable, "k8s.io", ctrID)
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		t.Fatal(err)
	}
	bundle := `{"annotations":{"io.kubernetes.cri.sandbox-namespace":"shop","io.kubernetes.cri.sandbox-name":"web-0","io.kubernetes.cri.container-name":"nginx"}}`
	if err := os.WriteFile(filepath.Join(ctr, "config.json"), []byte(bundle), 0o644); err != nil {
		t.Fatal(err)
	}
	// Root reads through any mode bits, so "cannot read" is made of a
	// path through a regular file (ENOTDIR), as an unreachable
	// /proc/1/root is for an agent without CAP_SYS_PTRACE (EACCES).
	blocker := filepath.Join(tmp, "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(blocker, "run", "containerd")
	missing := filepath.Join(tmp, "missing")

	cases := []struct {
		name      string
		dirs      []string
		available bool
		says      []string
	}{
		{"readable", []string{readable, missing}, true, []string{"container names from OCI bundles in " + readable}},
		{"unreadable first, readable fallback", []string{unreadable, readable}, true,
			[]string{"container names from OCI bundles in " + readable, "cannot read " + unreadable, "not a directory"}},
		{"only unreadable", []string{unreadable, missing}, false,
			[]string{"cannot read " + unreadable, "named by their hostname", "CAP_SYS_PTRACE"}},
		{"no runtime", []string{missing}, true, []string{"no container runtime directory"}},
		{"one directory seen twice", []string{readable, filepath.Join(readable, ".")}, true, []string{"container names from OCI bundles in " + readable}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := New(Options{RuntimeDirs: c.dirs})
			ok, why := r.BundleAccess()
			if ok != c.available {
				t.Errorf("available %v, want %v (%s)", ok, c.available, why)
			}
			for _, s := range c.says {
				if !strings.Contains(why, s) {
					t.Errorf("reason %q does not say %q", why, s)
				}
			}
			if c.name == "one directory seen twice" && strings.Count(why, readable) != 1 {
				t.Errorf("reason %q names one directory twice", why)
			}
		})
	}
	m, ok := bundleMeta([]string{unreadable, readable}, ctrID)
	if !ok || m.pod() != "shop/web-0" || m.Container != "nginx" {
		t.Errorf("bundle through the fallback: %+v, %v; want shop/web-0's nginx", m, ok)
	}
}
