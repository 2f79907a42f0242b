package tcpreset

import (
	"context"
	"net/netip"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/sourcetest"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// TestOwners causes NO_SOCKET resets in a pod's namespace, a named one
// and one a process holds, with the probe counting every namespace, and
// checks the owner children against each namespace's own counters
// (TcpOutRsts for sent resets, TcpAttemptFails for connects refused in
// SYN_SENT), that children add up to their parent exactly, and that the
// evidence names each owner.
func TestOwners(t *testing.T) {
	l := sourcetest.NewOwnerLab(t)
	// Many places: other tests' resets on this host must not crowd the
	// lab's owners out.
	src, err := Open(context.Background(), Options{Env: source.Env{Netns: l.Self, AllNetns: true, Owners: l.Resolver,
		TopOwners: 64, EvidencePerSecond: 10000}, MaxEventsPerInterval: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	if _, ok := src.(*bpfSource); !ok {
		netlab.SkipOrFail(t, "tcp_reset: BPF unavailable: %v", src.Capabilities())
	}
	collect := func() (map[string]uint64, []string, []*nbsv1.Event) {
		r, err := src.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r.Counters, r.Retired, r.Events
	}
	base, _, _ := collect()
	led := sourcetest.NewLedger(base)
	counts := []int{7, 5, 3}
	before := make([]map[string]uint64, len(l.Cases))
	for i, c := range l.Cases {
		before[i] = sourcetest.SNMP(t, c.H)
		netlab.ConnectRefusedIn(t, c.H, netip.MustParseAddrPort("127.0.0.1:9"), counts[i])
	}
	events := l.Collect(t, led, collect)

	sent := catalog.ResetSentReason("no_socket").ID
	recv := catalog.ResetReceivedState("syn_sent").ID
	for i, c := range l.Cases {
		after := sourcetest.SNMP(t, c.H)
		outRsts := after["Tcp.OutRsts"] - before[i]["Tcp.OutRsts"]
		fails := after["Tcp.AttemptFails"] - before[i]["Tcp.AttemptFails"]
		if outRsts != uint64(counts[i]) || fails != uint64(counts[i]) {
			t.Fatalf("%s: oracle TcpOutRsts +%d, TcpAttemptFails +%d, want %d each", c.Label, outRsts, fails, counts[i])
		}
		if got := led.Inc[sent+"/"+c.ID]; got != outRsts {
			t.Errorf("%s/%s = %d, TcpOutRsts +%d", sent, c.ID, got, outRsts)
		}
		if got := led.Inc[recv+"/"+c.ID]; got != fails {
			t.Errorf("%s/%s = %d, TcpAttemptFails +%d", recv, c.ID, got, fails)
		}
		l.CheckEvents(t, events, c, sent)
		l.CheckEvents(t, events, c, recv)
	}
	sourcetest.CheckSum(t, led, sent)
	sourcetest.CheckSum(t, led, recv)
}
