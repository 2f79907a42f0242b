package owner

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxFileBytes bounds what is read of any one file another process (or a
// container image) controls: an OCI config.json is tens of KB.
const maxFileBytes = 1 << 20

// DefaultRuntimeDirs are where container runtimes keep each container's OCI
// bundle (config.json with its annotations), seen through PID 1's root so
// that an agent in a container with the host's PID namespace reads the
// host's: containerd's shim v2 tasks (<dir>/<namespace>/<id>/config.json,
// Docker's "moby" namespace included) and CRI-O's and podman's containers
// (<dir>/<id>/userdata/config.json).
var DefaultRuntimeDirs = []string{
	"/proc/1/root/run/containerd/io.containerd.runtime.v2.task",
	"/proc/1/root/run/docker/containerd/daemon/io.containerd.runtime.v2.task",
	"/proc/1/root/run/containers/storage/overlay-containers",
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
