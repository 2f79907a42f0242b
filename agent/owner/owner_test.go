package owner

import (
	"strings"
	"testing"

	"github.com/nbs-project/nbs/internal/schema"
)

const (
	ctrID = "3f2a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
	uid   = "0c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5"
)

func TestParseCgroup(t *testing.T) {
	uidSystemd := strings.ReplaceAll(uid, "-", "_")
	for _, tc := range []struct {
		path string
		want cgroupInfo
	}{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSystemd + ".slice/cri-containerd-" + ctrID + ".scope",
			cgroupInfo{PodUID: uid, ContainerID: ctrID, Runtime: "containerd"}},
		{"/kubepods.slice/kubepods-pod" + uidSystemd + ".slice/crio-" + ctrID + ".scope",
			cgroupInfo{PodUID: uid, ContainerID: ctrID, Runtime: "cri-o"}},
		{"/kubepods/besteffort/pod" + uid + "/" + ctrID, cgroupInfo{PodUID: uid, ContainerID: ctrID}},
		// a static pod's uid is a hash without dashes; a prefix of our own
		{"/nbs-test-1a2b/kubepods/pod0123456789abcdef0123456789abcdef/" + ctrID,
			cgroupInfo{PodUID: "0123456789abcdef0123456789abcdef", ContainerID: ctrID}},
		{"/system.slice/docker-" + ctrID + ".scope", cgroupInfo{ContainerID: ctrID, Runtime: "docker"}},
		{"/docker/" + ctrID, cgroupInfo{ContainerID: ctrID, Runtime: "docker"}},
		{"/machine.slice/libpod-" + ctrID + ".scope", cgroupInfo{ContainerID: ctrID, Runtime: "podman"}},
		// not a pod outside kubepods; conmon is not a container
		{"/user.slice/pod" + uid + ".slice", cgroupInfo{}},
		{"/system.slice/crio-conmon-" + ctrID + ".scope", cgroupInfo{}},
		{"/user.slice/user-0.slice/session-1.scope", cgroupInfo{}},
		{"/", cgroupInfo{}},
	} {
		if got := parseCgroup(tc.path); got != tc.want {
			t.Errorf("parseCgroup(%q) = %+v, want %+v", tc.path, got, tc.want)
		}
	}
	if p, ok := cgroupV2Path("9:name=systemd:/\n1:cpu:/\n0::/a/b\n"); !ok || p != "/a/b" {
		t.Errorf("cgroupV2Path = %q, %v", p, ok)
	}
}

func TestIDAndName(t *testing.T) {
	long := strings.Repeat("x", 253)
	for _, tc := range []struct {
		o               Owner
		id, label, kind string
	}{
		{Owner{Kind: Host, Inode: 1}, "host", "host", "host"},
		{Owner{Kind: Pod, Pod: "shop/cart-7d9f", PodUID: uid}, "pod:shop.cart-7d9f", "pod shop/cart-7d9f", "pod"},
		{Owner{Kind: Pod, PodUID: uid}, "pod:" + uid, "pod uid " + uid, "pod"},
		{Owner{Kind: Container, ContainerID: ctrID, Runtime: "docker"}, "container:3f2a1b2c3d4e", "container docker 3f2a1b2c3d4e", "container"},
		{Owner{Kind: Netns, NetnsName: "Blue Net"}, "netns:blue_net", "netns Blue Net", "netns"},
		{Owner{Kind: Process, PID: 4242, Comm: "sleep"}, "process:sleep.4242", "process sleep (pid 4242)", "process"},
		{Owner{Kind: Unknown, Inode: 4026532177}, "inode:4026532177", "netns inode 4026532177", "unknown"},
	} {
		if got := tc.o.ID(); got != tc.id {
			t.Errorf("%+v: ID %q, want %q", tc.o, got, tc.id)
		}
		if got := tc.o.Label(); got != tc.label {
			t.Errorf("%+v: Label %q, want %q", tc.o, got, tc.label)
		}
		if f := tc.o.Fields(); f["owner_kind"] != tc.kind || f["owner"] != tc.o.Name() {
			t.Errorf("%+v: Fields %v", tc.o, f)
		}
	}
	// Long names stay one valid, bounded segment, and distinct.
	a := Owner{Kind: Pod, Pod: "ns/" + long + "a", PodUID: uid}.ID()
	b := Owner{Kind: Pod, Pod: "ns/" + long + "b", PodUID: uid}.ID()
	if len(a) > maxSegment || a == b || !schema.ValidID("tcp_reset/sent/no_socket/"+a) {
		t.Errorf("long ids %q, %q", a, b)
	}
}

// TestClean: what a container controls reaches the wire valid and bounded.
func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"web-1", 253, "web-1"},
		{"a\x00b\nc\xffd", 253, "a?b?c?d"},
		{"héllo", 2, "h"}, // never half a character
		{strings.Repeat("x", 300), 253, strings.Repeat("x", 253)},
	} {
		if got := clean(tc.in, tc.max); got != tc.want {
			t.Errorf("clean(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
