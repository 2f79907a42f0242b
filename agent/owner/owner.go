// Package owner names what owns a network namespace, so that evidence and
// per-namespace counts say "pod shop/cart-7d9f" instead of "4026532177".
//
// The owner of a namespace inode is, in order of preference:
//
//  1. the host, for the namespace of PID 1;
//  2. a Kubernetes pod, when a process in the namespace is in a pod's cgroup
//     (kubepods…pod<uid>…/<container id>); its namespace/name come from the
//     container runtime's OCI bundle annotations, else from the process
//     (POD_NAME/POD_NAMESPACE or HOSTNAME in its environment, the service
//     account's namespace file and /etc/hostname inside its root);
//  3. a container, when a process is in a docker, containerd, CRI-O or
//     podman cgroup (the runtime's id);
//  4. an `ip netns` name: a bind mount under /run/netns with that inode;
//  5. the process that holds it: the lowest PID whose /proc/PID/ns/net has
//     that inode (its comm);
//
// and otherwise unknown. Everything is read from /proc and the cgroup v2
// paths in /proc/PID/cgroup, so the agent needs the host's PID namespace
// (hostPID) and the right to read other processes' /proc entries.
package owner

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nbs-project/nbs/internal/schema"
)

// Kind says what an Owner is.
type Kind string

const (
	Host      Kind = "host"
	Pod       Kind = "pod"
	Container Kind = "container"
	Netns     Kind = "netns"
	Process   Kind = "process"
	Unknown   Kind = "unknown"
)

// Owner is what owns one network namespace.
type Owner struct {
	Kind  Kind
	Inode uint32
	// Pod is "namespace/name" when known; PodUID comes from the cgroup
	// path and is always set for a pod.
	Pod    string
	PodUID string
	// ContainerID is the runtime's id (64 hex digits) of the container the
	// chosen process runs in; Runtime names the runtime ("containerd",
	// "cri-o", "docker", "podman"); ContainerName is the runtime's or
	// Kubernetes' name for it when the runtime's files say.
	ContainerID   string
	ContainerName string
	Runtime       string
	// NetnsName is the `ip netns` name, if the namespace has one.
	NetnsName string
	// PID and Comm are the process the owner was found from (the lowest PID
	// in the namespace for a process owner).
	PID  int
	Comm string
}

// maxSegment bounds an owner's metric id segment, so a child id under any
// branch stays well within schema.MaxIDLen.
const maxSegment = 96

// Name is how an operator reads the owner: "shop/cart-7d9f",
// "containerd 3f2a1b2c3d4e", "blue", "sleep (pid 4242)".
func (o Owner) Name() string {
	switch o.Kind {
	case Host:
		return "host"
	case Pod:
		if o.Pod != "" {
			return o.Pod
		}
		return "uid " + o.PodUID
	case Container:
		n := shortID(o.ContainerID)
		if o.ContainerName != "" {
			n = o.ContainerName + " (" + n + ")"
		}
		if o.Runtime != "" {
			n = o.Runtime + " " + n
		}
		return n
	case Netns:
		return o.NetnsName
	case Process:
		return fmt.Sprintf("%s (pid %d)", o.Comm, o.PID)
	}
	return fmt.Sprintf("netns inode %d", o.Inode)
}

// Label is the kind and the name: "pod shop/cart-7d9f".
func (o Owner) Label() string {
	if o.Kind == Host || o.Kind == Unknown {
		return o.Name()
	}
	return string(o.Kind) + " " + o.Name()
}

// ID is the owner as one metric id segment (schema.Segment), the same for
// the same owner in every interval and across agent restarts:
// "pod:shop.cart-7d9f", "container:3f2a1b2c3d4e", "netns:blue",
// "process:sleep.4242", "host", "inode:4026532177". Each kind has its own
// prefix, so no owner's id is "other".
func (o Owner) ID() string {
	var id string
	switch o.Kind {
	case Host:
		return "host"
	case Pod:
		if ns, name, ok := cutPod(o.Pod); ok {
			id = "pod:" + ns + "." + name // namespaces are DNS labels: no '.'
		} else {
			id = "pod:" + o.PodUID
		}
	case Container:
		id = "container:" + shortID(o.ContainerID)
	case Netns:
		id = "netns:" + o.NetnsName
	case Process:
		id = "process:" + o.Comm + "." + strconv.Itoa(o.PID)
	default:
		id = "inode:" + strconv.FormatUint(uint64(o.Inode), 10)
	}
	id = schema.Segment(id)
	if len(id) > maxSegment {
		// Keep it unique: a hash of the whole id replaces the tail.
		h := fnv.New32a()
		h.Write([]byte(id))
		id = fmt.Sprintf("%s-%08x", id[:maxSegment-9], h.Sum32())
	}
	return id
}

// Fields are the owner as evidence event fields: owner, owner_kind, and
// pod, pod_uid, container, container_name, runtime, netns_name, pid, comm
// where known.
func (o Owner) Fields() map[string]string {
	f := make(map[string]string, 4)
	o.AddFields(f)
	return f
}

// AddFields sets Fields' entries in f: an event's own fields take them
// without a map of their own in between (an evidence reader annotates
// every event it reads).
func (o Owner) AddFields(f map[string]string) {
	f["owner"], f["owner_kind"] = o.Name(), string(o.Kind)
	add := func(k, v string) {
		if v != "" {
			f[k] = v
		}
	}
	add("pod", o.Pod)
	add("pod_uid", o.PodUID)
	add("container", o.ContainerID)
	add("container_name", o.ContainerName)
	add("runtime", o.Runtime)
	add("netns_name", o.NetnsName)
	if o.PID > 0 {
		add("pid", strconv.Itoa(o.PID))
		add("comm", o.Comm)
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func cutPod(pod string) (ns, name string, ok bool) {
	for i := 0; i < len(pod); i++ {
		if pod[i] == '/' {
			return pod[:i], pod[i+1:], i > 0 && i < len(pod)-1
		}
	}
	return "", "", false
}

// Name lengths kept: a pod's name and namespace are at most 253 and 63
// bytes in Kubernetes, a comm 16, a file name 255.
const (
	maxName      = 253
	maxNamespace = 63
	maxComm      = 64
)

// clean makes text a container or process controls (its environment, its
// files, its comm, a runtime's annotations, a file name) fit for the wire:
// valid UTF-8 without control characters (the collector rejects a report
// with NUL or invalid UTF-8 in an event field), at most max bytes, cut at
// a character boundary.
func clean(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
