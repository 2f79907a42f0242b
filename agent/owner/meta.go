package owner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxFileBytes bounds what is read of any one file another process (or a
// container image) controls: an OCI config.json is tens of KB.
const maxFileBytes = 1 << 20

// runtimeDirs are where container runtimes keep each container's OCI
// bundle (config.json with its annotations): containerd's shim v2 tasks
// (<dir>/<namespace>/<id>/config.json, Docker's "moby" namespace included)
// and CRI-O's and podman's containers (<dir>/<id>/userdata/config.json).
var runtimeDirs = []string{
	"/run/containerd/io.containerd.runtime.v2.task",
	"/run/docker/containerd/daemon/io.containerd.runtime.v2.task",
	"/run/containers/storage/overlay-containers",
}

// DefaultRuntimeDirs lists each runtime directory twice: first through PID
// 1's root, so that an agent in a container with the host's PID namespace
// reads the host's; then as the agent's own root has it, for an agent on
// the host or one whose pod mounts the runtime's directory, where PID 1's
// root is out of reach (it takes CAP_SYS_PTRACE, and a hardened pod lacks
// it). Resolver.BundleAccess says which of them the agent can read.
func DefaultRuntimeDirs() []string {
	out := make([]string, 0, 2*len(runtimeDirs))
	for _, d := range runtimeDirs {
		out = append(out, "/proc/1/root"+d)
	}
	return append(out, runtimeDirs...)
}

// podMeta is what the runtime's or the pod's own files say.
type podMeta struct {
	Namespace, Name, Container string
}

// Annotations the runtimes put on every container of a pod: containerd's
// CRI plugin and CRI-O (and the kubelet's names for dockershim).
var (
	annNamespace = []string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"}
	annName      = []string{"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"}
	annContainer = []string{"io.kubernetes.cri.container-name", "io.kubernetes.container.name", "nerdctl/name"}
)

// bundleMeta reads a container's OCI bundle annotations from the first
// runtime directory that has it.
func bundleMeta(dirs []string, id string) (podMeta, bool) {
	if id == "" {
		return podMeta{}, false
	}
	for _, d := range dirs {
		cands := []string{filepath.Join(d, id, "config.json"), filepath.Join(d, id, "userdata", "config.json")}
		if ms, _ := filepath.Glob(filepath.Join(d, "*", id, "config.json")); len(ms) > 0 {
			cands = append(cands, ms...)
		}
		for _, p := range cands {
			b, err := readLimited(p)
			if err != nil {
				continue
			}
			if m, ok := parseBundle(b); ok {
				return m, true
			}
		}
	}
	return podMeta{}, false
}

// parseBundle reads the annotations of an OCI config.json.
func parseBundle(b []byte) (podMeta, bool) {
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(b, &spec) != nil {
		return podMeta{}, false
	}
	return podMeta{Namespace: first(spec.Annotations, annNamespace), Name: first(spec.Annotations, annName),
		Container: first(spec.Annotations, annContainer)}, true
}

// pod is "namespace/name", "name" without a namespace, or "". Both come
// from files and variables the pod itself may write: they are bounded, and
// '/', which separates them, is kept out of each.
func (m podMeta) pod() string {
	name := clean(strings.ReplaceAll(m.Name, "/", "_"), maxName)
	ns := clean(strings.ReplaceAll(m.Namespace, "/", "_"), maxNamespace)
	switch {
	case name == "":
		return ""
	case ns == "":
		return name
	}
	return ns + "/" + name
}

func first(m map[string]string, keys []string) string {
	for _, k := range keys {
		if v := m[k]; v != "" {
			return v
		}
	}
	return ""
}

// processMeta is the fallback without the runtime's files: the pod's name
// is the container's hostname (the kubelet sets it to the pod's name, and
// HOSTNAME in the environment to match), its namespace the service
// account's namespace file, which every pod with a token mounted has.
// POD_NAME and POD_NAMESPACE, the usual downward-API variables, win when
// set. Files are read inside the process's root, symlinks resolved there.
func processMeta(proc string, pid int) podMeta {
	env := environ(filepath.Join(proc, itoa(pid), "environ"))
	root := filepath.Join(proc, itoa(pid), "root")
	m := podMeta{Namespace: env["POD_NAMESPACE"], Name: env["POD_NAME"]}
	if m.Name == "" {
		m.Name = env["HOSTNAME"]
	}
	if m.Name == "" {
		m.Name = readInRoot(root, "/etc/hostname")
	}
	if m.Namespace == "" {
		m.Namespace = readInRoot(root, "/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	}
	return m
}

func environ(path string) map[string]string {
	b, err := readLimited(path)
	if err != nil {
		return nil
	}
	env := map[string]string{}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}

// readInRoot reads a small text file at path inside root, resolving every
// symlink within root (openat2 RESOLVE_IN_ROOT: a container image's
// /var/run -> /run must not lead to the agent's /run).
func readInRoot(root, path string) string {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, strings.TrimPrefix(path, "/"), &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256)) // a DNS name or label
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

var errTooLarge = errors.New("file too large")

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, errTooLarge
	}
	return b, nil
}

// BundleAccess says whether container names can come from the runtimes'
// OCI bundles, and why not, for the agent's capability list (where an
// operator looks when pods show under their hostnames): a runtime
// directory that exists but cannot be read is said, with the error, and
// how to give the agent access. Directories that do not exist are no
// runtime of that kind on this host, not a fault.
func (r *Resolver) BundleAccess() (available bool, reason string) {
	var readable, denied []string
	seen := map[string]bool{}
	for _, d := range r.opts.RuntimeDirs {
		f, err := os.Open(d)
		if err == nil {
			_, err = f.Readdirnames(1)
			f.Close()
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			denied = append(denied, fmt.Sprintf("%s (%v)", d, unwrapPath(err)))
			continue
		}
		// /proc/1/root/run/x and /run/x are one directory for an agent on
		// the host: say it once.
		key := d
		if fi, err := os.Stat(d); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				key = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
			}
		}
		if !seen[key] {
			seen[key] = true
			readable = append(readable, d)
		}
	}
	switch {
	case len(readable) > 0 && len(denied) == 0:
		return true, "container names from OCI bundles in " + strings.Join(readable, ", ")
	case len(readable) > 0:
		return true, "container names from OCI bundles in " + strings.Join(readable, ", ") + "; cannot read " + strings.Join(denied, ", ")
	case len(denied) > 0:
		return false, "cannot read " + strings.Join(denied, ", ") + ": pods are named by their hostname and service account instead, " +
			"without container names; give the agent the host's PID namespace and CAP_SYS_PTRACE, or mount the runtime's directory under /run"
	}
	return true, "no container runtime directory on this host (" + strings.Join(r.opts.RuntimeDirs, ", ") + "): pods, if any, are named by their hostname and service account"
}

// unwrapPath drops the path from an *os.PathError: the caller names the
// directory already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
