package netlab

import (
	"os"
	"strings"
	"testing"
)

func TestLabTopology(t *testing.T) {
	l := New(t)
	if l.A == l.B || l.IPA == l.IPB {
		t.Fatalf("lab endpoints not distinct: %+v", l)
	}
	a, b := l.Inode(t, l.A), l.Inode(t, l.B)
	if a == 0 || b == 0 || a == b {
		t.Fatalf("inodes A=%d B=%d, want distinct and non-zero", a, b)
	}
	for _, c := range []struct {
		ns, want, notWant string
	}{{l.A, l.IPA.String(), l.IPB.String()}, {l.B, l.IPB.String(), l.IPA.String()}} {
		out := l.Exec(t, c.ns, "ip", "-o", "addr", "show")
		if !strings.Contains(out, c.want+"/24") || strings.Contains(out, c.notWant+"/") {
			t.Errorf("%s addresses: want %s and not %s, got:\n%s", c.ns, c.want, c.notWant, out)
		}
	}
	// ping_group_range opened: an unprivileged ICMP socket would be allowed.
	got, err := readIn(l, l.A, "/proc/sys/net/ipv4/ping_group_range")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(got); len(f) != 2 || f[0] != "0" || f[1] != "2147483647" {
		t.Errorf("ping_group_range in %s = %q", l.A, got)
	}
	if n := l.Nstat(t, l.A); n["TcpOutRsts"] != 0 || len(n) < 50 {
		t.Errorf("fresh namespace nstat: TcpOutRsts=%d, %d counters", n["TcpOutRsts"], len(n))
	}
}

func readIn(l *Lab, ns, path string) (string, error) {
	var s string
	err := l.Do(ns, func() error {
		b, err := os.ReadFile(path)
		s = string(b)
		return err
	})
	return s, err
}

// Each recipe must move exactly its nstat counter by n in exactly the
// namespace that sends the resets, and TcpOutRsts along with it.
func TestRecipes(t *testing.T) {
	const n = 7
	l := New(t)
	tests := []struct {
		name    string
		recipe  func(testing.TB, int)
		sender  string
		counter string
	}{
		{"no socket", l.ResetNoSocket, l.B, "TcpOutRsts"},
		{"abort on close", l.ResetAbortOnClose, l.B, "TcpExtTCPAbortOnClose"},
		{"linger zero", l.ResetLingerZero, l.A, "TcpExtTCPAbortOnData"},
		{"abort on linger", l.ResetAbortOnLinger, l.A, "TcpExtTCPAbortOnLinger"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := map[string]map[string]uint64{l.A: l.Nstat(t, l.A), l.B: l.Nstat(t, l.B)}
			tt.recipe(t, n)
			for _, ns := range []string{l.A, l.B} {
				after := l.Nstat(t, ns)
				wantRsts, want := uint64(0), uint64(0)
				if ns == tt.sender {
					wantRsts, want = n, n
				}
				if d := after["TcpOutRsts"] - before[ns]["TcpOutRsts"]; d != wantRsts {
					t.Errorf("%s TcpOutRsts +%d, want +%d", ns, d, wantRsts)
				}
				if d := after[tt.counter] - before[ns][tt.counter]; d != want {
					t.Errorf("%s %s +%d, want +%d", ns, tt.counter, d, want)
				}
			}
		})
	}
}

func TestCleanupRemovesNamespaces(t *testing.T) {
	var names []string
	t.Run("lab", func(t *testing.T) {
		l := New(t)
		names = []string{l.A, l.B}
	})
	if names == nil {
		t.Skip("lab was skipped")
	}
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); !os.IsNotExist(err) {
			t.Errorf("/run/netns/%s still there after cleanup (err %v)", n, err)
		}
	}
}
