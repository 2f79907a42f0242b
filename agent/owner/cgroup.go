package owner

import (
	"regexp"
	"strings"
)

// cgroupInfo is what a process's cgroup v2 path says about it.
type cgroupInfo struct {
	PodUID      string
	ContainerID string
	Runtime     string
}

// The naming of the kubelet (systemd and cgroupfs drivers) and of the
// container runtimes:
//
//	/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope
//	/kubepods/besteffort/pod<uid>/<id>
//	/system.slice/docker-<id>.scope   /docker/<id>   /machine.slice/libpod-<id>.scope
//
// The systemd driver writes the uid's '-' as '_'. Static pods have a uid of
// 32 hex digits without dashes. The path may have any prefix (the test's
// own directory, a nested cgroup namespace), so segments are matched
// anywhere in it.
var (
	podSegment = regexp.MustCompile(`(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?$`)
	scopeID    = regexp.MustCompile(`^(cri-containerd|containerd|crio|docker|libpod|nerdctl)-([0-9a-f]{64})\.scope$`)
	bareID     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

var runtimeOfPrefix = map[string]string{
	"cri-containerd": "containerd", "containerd": "containerd", "nerdctl": "containerd",
	"crio": "cri-o", "docker": "docker", "libpod": "podman",
}

// parseCgroup reads a cgroup v2 path (the "0::" line of /proc/PID/cgroup).
func parseCgroup(path string) cgroupInfo {
	var c cgroupInfo
	segs := strings.Split(strings.Trim(path, "/"), "/")
	kube := false
	for i, s := range segs {
		if strings.HasPrefix(s, "kubepods") {
			kube = true
		}
		if kube {
			if m := podSegment.FindStringSubmatch(s); m != nil {
				c.PodUID = strings.ReplaceAll(m[1], "_", "-")
				continue
			}
		}
		if m := scopeID.FindStringSubmatch(s); m != nil {
			c.ContainerID, c.Runtime = m[2], runtimeOfPrefix[m[1]]
			continue
		}
		if bareID.MatchString(s) {
			c.ContainerID, c.Runtime = s, ""
			if i > 0 && segs[i-1] == "docker" {
				c.Runtime = "docker"
			}
		}
	}
	return c
}

// cgroupV2Path picks the cgroup v2 line ("0::/path") out of /proc/PID/cgroup.
func cgroupV2Path(file string) (string, bool) {
	for line := range strings.SplitSeq(file, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, true
		}
	}
	return "", false
}
