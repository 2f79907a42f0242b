// Package netlab builds, for tests, a lab of two network namespaces joined by
// a veth pair, with an independent oracle (nstat) and recipes that make the
// kernel send TCP resets for known reasons.
//
//	A: vA 198.18.X.1/24 2001:2:0:X::1/64  <-- veth -->  B: vB 198.18.X.2/24 2001:2:0:X::2/64
//
// 198.18.0.0/15 and 2001:2::/48 are the benchmarking ranges; there is no
// route out of the lab. Each lab has its own namespace names and its own X,
// so packages testing in parallel do not meet.
package netlab

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/netns"
)

// RequireEnv is the environment variable that turns skips for missing
// privileges or kernel features into failures (set it in CI on machines that
// are known to support everything).
const RequireEnv = "NBS_REQUIRE_BPF"

// SkipShort skips the test under go test -short (make check, the unit
// tests only): a lab loads the machine and times against the kernel, so it
// runs in make test, one package at a time. make test and CI never pass
// -short.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs the namespace lab (make test runs it)")
	}
}

// SkipOrFail skips the test for a reason outside the code under test (not
// root, no BPF support), or fails it when RequireEnv=1 says that reason
// must not occur here.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1 requires this to work)", msg, RequireEnv)
	}
	t.Skip(msg)
}

// Lab is a pair of network namespaces joined by a veth pair.
type Lab struct {
	// A and B are the namespace names (for `ip netns exec`).
	A, B string
	// IPA and IPB are the IPv4 addresses of vA (in A) and vB (in B).
	IPA, IPB netip.Addr
	// IP6A and IP6B are their IPv6 addresses.
	IP6A, IP6B netip.Addr
	// ClosedPort has no listener in either namespace; the recipes never
	// use it for anything else.
	ClosedPort uint16

	handles map[string]netns.Handle
}

// New builds a lab and registers its removal with t.Cleanup. Without root or
// iproute2 it skips the test (fails it when NBS_REQUIRE_BPF=1).
func New(t testing.TB) *Lab {
	t.Helper()
	SkipShort(t)
	if os.Geteuid() != 0 {
		SkipOrFail(t, "netlab: needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		SkipOrFail(t, "netlab: iproute2 `ip` not found: %v", err)
	}

	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("netlab: random suffix: %v", err)
	}
	suffix := hex.EncodeToString(rnd[:4])
	x := binary.BigEndian.Uint16(rnd[4:]) % 512 // 198.18.0.0/15 holds 512 /24s
	l := &Lab{
		A:          "nbsA-" + suffix,
		B:          "nbsB-" + suffix,
		IPA:        netip.AddrFrom4([4]byte{198, 18 + byte(x/256), byte(x), 1}),
		IPB:        netip.AddrFrom4([4]byte{198, 18 + byte(x/256), byte(x), 2}),
		IP6A:       netip.MustParseAddr(fmt.Sprintf("2001:2:0:%x::1", x)),
		IP6B:       netip.MustParseAddr(fmt.Sprintf("2001:2:0:%x::2", x)),
		ClosedPort: 9, // discard: nothing in a fresh namespace listens there
		handles:    map[string]netns.Handle{},
	}

	if out, err := exec.Command("ip", "netns", "add", l.A).CombinedOutput(); err != nil {
		SkipOrFail(t, "netlab: cannot create network namespaces: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { l.remove(t) })
	l.ip(t, "netns", "add", l.B)
	// Creating each end directly in its namespace keeps the root
	// namespace free of lab interfaces, so fixed names cannot clash.
	l.ip(t, "link", "add", "vA", "netns", l.A, "type", "veth", "peer", "name", "vB", "netns", l.B)
	for _, c := range []struct {
		ns, dev string
		v4, v6  netip.Addr
	}{{l.A, "vA", l.IPA, l.IP6A}, {l.B, "vB", l.IPB, l.IP6B}} {
		l.ip(t, "-n", c.ns, "addr", "add", c.v4.String()+"/24", "dev", c.dev)
		// nodad: the address is usable at once instead of after ~1 s.
		l.ip(t, "-n", c.ns, "addr", "add", c.v6.String()+"/64", "dev", c.dev, "nodad")
		l.ip(t, "-n", c.ns, "link", "set", "lo", "up")
		l.ip(t, "-n", c.ns, "link", "set", c.dev, "up")
		h, err := netns.Resolve(c.ns)
		if err != nil {
			t.Fatalf("netlab: %v", err)
		}
		l.handles[c.ns] = h
		// Unprivileged ICMP sockets are off ("1 0") in a new namespace.
		if err := h.Do(func() error {
			return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0)
		}); err != nil {
			t.Fatalf("netlab: open ping_group_range in %s: %v", c.ns, err)
		}
	}
	l.waitReachable(t)
	return l
}

func (l *Lab) ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("netlab: ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// waitReachable waits until the veth carries traffic both ways in both
// families. Recipes need this: a reset dropped on a link that is not up yet
// is retransmitted, and the kernel then counts two resets for one.
func (l *Lab) waitReachable(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, dst := range []netip.Addr{l.IPB, l.IP6B} {
		for {
			out, err := exec.Command("ip", "netns", "exec", l.A, "ping", "-c1", "-W1", dst.String()).CombinedOutput()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("netlab: %s unreachable from %s: %v: %s", dst, l.A, err, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (l *Lab) remove(t testing.TB) {
	for _, ns := range []string{l.A, l.B} {
		out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "No such file") {
			t.Errorf("netlab: ip netns del %s: %v: %s", ns, err, out)
		}
	}
}

func (l *Lab) handle(ns string) (netns.Handle, error) {
	h, ok := l.handles[ns]
	if !ok {
		return netns.Handle{}, fmt.Errorf("netlab: %q is not a namespace of this lab (%s, %s)", ns, l.A, l.B)
	}
	return h, nil
}

// Exec runs a command inside ns and returns its combined output; failure
// fails the test.
func (l *Lab) Exec(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("netlab: in %s: %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Nstat returns the absolute SNMP and netstat counters of ns as iproute2's
// nstat reports them (TcpOutRsts, TcpExtTCPAbortOnClose, ...): the oracle
// independent of any code under test.
func (l *Lab) Nstat(t testing.TB, ns string) map[string]uint64 {
	t.Helper()
	if _, err := exec.LookPath("nstat"); err != nil {
		SkipOrFail(t, "netlab: iproute2 `nstat` not found: %v", err)
	}
	// -a absolute, -s do not touch nstat's history file, -z include zeros.
	out := l.Exec(t, ns, "nstat", "-asz")
	m := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader([]byte(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			m[f[0]] = v
		}
	}
	if len(m) == 0 {
		t.Fatalf("netlab: nstat in %s printed no counters: %q", ns, out)
	}
	return m
}

// Do runs fn on a thread inside ns (see netns.Handle.Do).
func (l *Lab) Do(ns string, fn func() error) error {
	h, err := l.handle(ns)
	if err != nil {
		return err
	}
	return h.Do(fn)
}

// Inode returns the inode of ns, as BPF programs see it (net->ns.inum).
func (l *Lab) Inode(t testing.TB, ns string) uint32 {
	t.Helper()
	h, err := l.handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	return h.Inode
}
