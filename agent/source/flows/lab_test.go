package flows

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// star is a lab of leaf namespaces (fake pods, owners netns:<name>) on one
// bridge in a hub namespace, each with one address in a /24 of its own.
type star struct {
	prefix string
	hub    string
	net    [3]byte // 10.x.y.0/24
	leaves map[string]leaf
}

type leaf struct {
	ns   string
	addr netip.Addr
	h    netns.Handle
}

func newStar(t *testing.T) *star {
	t.Helper()
	netlab.SkipShort(t)
	if os.Geteuid() != 0 {
		netlab.SkipOrFail(t, "flows lab: needs root")
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	x := binary.BigEndian.Uint16(rnd[4:])
	s := &star{prefix: "nbsF" + hex.EncodeToString(rnd[:3]), net: [3]byte{10, 200 + byte(x%50), byte(x >> 8)},
		leaves: map[string]leaf{}}
	s.hub = s.prefix + "-hub"
	if out, err := exec.Command("ip", "netns", "add", s.hub).CombinedOutput(); err != nil {
		netlab.SkipOrFail(t, "flows lab: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		for name := range s.leaves {
			s.del(t, name)
		}
		_ = exec.Command("ip", "netns", "del", s.hub).Run()
	})
	s.ip(t, "-n", s.hub, "link", "add", "br0", "type", "bridge")
	s.ip(t, "-n", s.hub, "link", "set", "br0", "up")
	return s
}

func (s *star) ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// add makes leaf name with host number n (10.x.y.n).
func (s *star) add(t *testing.T, name string, n byte) leaf {
	t.Helper()
	ns := s.prefix + "-" + name
	s.ip(t, "netns", "add", ns)
	port := fmt.Sprintf("p%s", name)
	s.ip(t, "-n", s.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
	s.ip(t, "-n", s.hub, "link", "set", port, "master", "br0", "up")
	addr := netip.AddrFrom4([4]byte{s.net[0], s.net[1], s.net[2], n})
	s.ip(t, "-n", ns, "addr", "add", addr.String()+"/24", "dev", "eth0")
	s.ip(t, "-n", ns, "link", "set", "lo", "up")
	s.ip(t, "-n", ns, "link", "set", "eth0", "up")
	h, err := netns.Resolve(ns)
	if err != nil {
		t.Fatal(err)
	}
	l := leaf{ns: ns, addr: addr, h: h}
	s.leaves[name] = l
	return l
}

func (s *star) del(t *testing.T, name string) {
	l, ok := s.leaves[name]
	if !ok {
		return
	}
	delete(s.leaves, name)
	if out, err := exec.Command("ip", "netns", "del", l.ns).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v: %s", l.ns, err, out)
	}
	_ = exec.Command("ip", "-n", s.hub, "link", "del", "p"+name).Run()
}

// nstat reads a namespace's absolute SNMP/netstat counters.
func nstat(t *testing.T, ns string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "nstat", "-asz").CombinedOutput()
	if err != nil {
		t.Fatalf("nstat in %s: %v: %s", ns, err, out)
	}
	m := map[string]uint64{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && !strings.HasPrefix(f[0], "#") {
			var v uint64
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

// waitFor polls cond every 20 ms for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
