package flows

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A namespace that tracks nothing is not dumped (its count says so), and
// one that tracks a connection still is: its count says how many it holds
// and the dump finds the connection.
func TestConntrackCountSkipsOnlyEmptyTables(t *testing.T) {
	lab := newStar(t)
	srv := lab.add(t, "s", 21)
	listen(t, srv, 7000, func(c net.Conn) { <-t.Context().Done(); c.Close() })
	for _, tc := range []struct {
		name  string
		track bool // a ct rule: the namespace's connections are tracked
	}{
		{"untracked", false},
		{"tracked", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lab.add(t, tc.name, map[bool]byte{false: 11, true: 12}[tc.track])
			if tc.track {
				cmd := exec.Command("ip", "netns", "exec", l.ns, "nft", "-f", "-")
				cmd.Stdin = strings.NewReader(`table ip nbs_ct {
	chain out {
		type filter hook output priority 0; policy accept;
		ct state new accept
	}
}`)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("nft: %v: %s", err, out)
				}
			}
			c, err := dial(l, netip.AddrPortFrom(srv.addr, 7000))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			local := netip.MustParseAddrPort(c.LocalAddr().String())

			var n uint32
			var ok bool
			if err := l.h.Do(func() error {
				fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
					return err
				}
				n, ok = conntrackCount(fd, make([]byte, 64<<10))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Fatal("the kernel gave no conntrack count")
			}
			table, err := conntrackTCP(l.h, make([]byte, ctBufBytes))
			if err != nil {
				t.Fatal(err)
			}
			_, found := table[ctTuple{src: local, dst: netip.AddrPortFrom(srv.addr, 7000)}]
			if tc.track && (n == 0 || !found) {
				t.Errorf("tracked namespace: count %d, connection %s found %v; want a count and the connection (table %v)", n, local, found, table)
			}
			if !tc.track && (n != 0 || len(table) != 0) {
				t.Errorf("untracked namespace: count %d, table %v; want none", n, table)
			}
		})
	}
}
