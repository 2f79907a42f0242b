package latencyecn

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func load(t *testing.T, opts Options) *Probe {
	t.Helper()
	p, err := Load(opts)
	if err != nil {
		netlab.SkipOrFail(t, "latencyecn: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// peerOf returns the counts of addr received by device vB in namespace
// netns (other tests' labs have devices of the same name elsewhere).
func peerOf(t *testing.T, p *Probe, netns uint32, addr netip.Addr) Counts {
	t.Helper()
	peers, err := p.Peers()
	if err != nil {
		t.Fatal(err)
	}
	for pr, c := range peers {
		if pr.Netns == netns && pr.Device == "vB" && pr.Addr == addr {
			return c
		}
	}
	return Counts{}
}

// A marks UDP datagrams to B at its output hook with nftables: all
// ECN-capable (ECT(0)), then about a third CE, each rule counting what it
// marked. What B's vB received from each of A's addresses equals the
// rules' counters exactly (CE the CE rule's, ECT the rest), per family,
// and the CE marks equal what B's kernel counted (IpExtInCEPkts,
// Ip6InCEPkts). A probe restricted to A counts nothing of B's.
func TestCEMarksMatchTheMarkingRule(t *testing.T) {
	lab := netlab.New(t)
	inB := lab.Inode(t, lab.B)
	p := load(t, Options{NetnsInode: inB})
	other := load(t, Options{NetnsInode: lab.Inode(t, lab.A)})
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	if err := other.Attach(); err != nil {
		t.Fatal(err)
	}
	const port = 9999
	for _, tc := range []struct {
		family   string // nft's: ip or ip6
		from, to netip.Addr
	}{
		{"ip", lab.IPA, lab.IPB},
		{"ip6", lab.IP6A, lab.IP6B},
	} {
		t.Run(tc.family, func(t *testing.T) {
			lab.Nft(t, lab.A, fmt.Sprintf(`table inet nbs_ect { chain out { type filter hook output priority 0; policy accept;
  %s daddr %s udp dport %d counter %s ecn set ect0
}
}`, tc.family, tc.to, port, tc.family))
			lab.Nft(t, lab.A, fmt.Sprintf(`table inet nbs_ce { chain out { type filter hook output priority 10; policy accept;
  %s daddr %s udp dport %d numgen random mod 3 == 0 counter %s ecn set ce
}
}`, tc.family, tc.to, port, tc.family))
			t.Cleanup(func() {
				lab.NftDelete(t, lab.A, "nbs_ect")
				lab.NftDelete(t, lab.A, "nbs_ce")
			})
			before := peerOf(t, p, inB, tc.from)
			nb := lab.Nstat(t, lab.B)
			lab.SendUDP(t, lab.A, netip.AddrPortFrom(tc.to, port), 3000, 200, 0)
			got := peerOf(t, p, inB, tc.from)
			na := lab.Nstat(t, lab.B)
			ce, ect := lab.NftPackets(t, lab.A, "nbs_ce"), lab.NftPackets(t, lab.A, "nbs_ect")
			counter := map[string]string{"ip": "IpExtInCEPkts", "ip6": "Ip6InCEPkts"}[tc.family]
			kernel := na[counter] - nb[counter]
			dce, dect, dsegs := got.CE-before.CE, got.ECT-before.ECT, got.CESegments-before.CESegments
			t.Logf("%s: CE %d (segments %d), ECT %d; nft CE %d of %d ECN-capable; %s %d", tc.family, dce, dsegs, dect, ce, ect, counter, kernel)
			if ect != 3000 || ce == 0 || ce == ect {
				t.Fatalf("nft marked %d CE of %d ECT(0); want 3000 ECT(0), a share CE", ce, ect)
			}
			if dce != ce || dect != ect-ce || dsegs != dce || kernel != dce {
				t.Errorf("counted CE %d (segments %d), ECT %d; want nft's CE %d, ECT %d, and %s %d", dce, dsegs, dect, ce, ect-ce, counter, kernel)
			}
		})
	}
	// A receives B's ICMP port unreachables (rate-limited, and carrying
	// the datagrams' ECN bits): counted there, under A's devices only.
	peers, err := other.Peers()
	if err != nil {
		t.Fatal(err)
	}
	inA := lab.Inode(t, lab.A)
	for pr := range peers {
		if pr.Netns != inA {
			t.Errorf("the probe restricted to A counted %+v", pr)
		}
	}
}
