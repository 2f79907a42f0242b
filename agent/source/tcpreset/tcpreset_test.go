package tcpreset

import (
	"context"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/netns"
	"github.com/nbs-project/nbs/agent/owner"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netlab"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// ledger turns cumulative readings into increases as the agent does: a
// counter seen first counts from 0, a retired one is forgotten.
type ledger struct {
	last, inc map[string]uint64
	events    []*nbsv1.Event
}

func (l *ledger) add(r source.Reading) {
	for _, id := range r.Retired {
		delete(l.last, id)
	}
	for id, v := range r.Counters {
		l.inc[id] += v - min(l.last[id], v)
		l.last[id] = v
	}
	l.events = append(l.events, r.Events...)
}

// snmp reads a namespace's /proc/net/snmp from inside it: the kernel's own
// counters, independent of the probe.
func snmp(t *testing.T, h netns.Handle) map[string]uint64 {
	t.Helper()
	c, err := procnet.NewReader(h.ReadFile).SNMP()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOwners causes NO_SOCKET resets in a pod's namespace, a named one
// and one a process holds, with the probe counting every namespace, and
// checks the owner children against each namespace's own counters
// (TcpOutRsts for sent resets, TcpAttemptFails for connects refused in
// SYN_SENT), that children add up to their parent exactly, and that the
// evidence names each owner.
func TestOwners(t *testing.T) {
	lab := netlab.New(t)
	own := lab.Own(t)
	self, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	res := owner.New(owner.Options{RuntimeDirs: []string{own.RuntimeDir}, RescanEvery: 10 * time.Millisecond})
	// Many places: other tests' resets on this host must not crowd the
	// lab's owners out.
	src, err := Open(context.Background(), Options{Env: source.Env{Netns: self, AllNetns: true, Owners: res,
		TopOwners: 64, EvidencePerSecond: 10000}, MaxEventsPerInterval: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	if _, ok := src.(*bpfSource); !ok {
		netlab.SkipOrFail(t, "tcp_reset: BPF unavailable: %v", src.Capabilities())
	}
	hA, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	hB, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		h     netns.Handle
		n     int
		id    string
		kind  owner.Kind
		label string
	}{
		{hA, 7, "pod:shop." + own.PodName, owner.Pod, own.PodNamespace + "/" + own.PodName},
		{hB, 5, "netns:" + schema.Segment(lab.B), owner.Netns, lab.B},
		{own.Proc, 3, "process:sleep." + strconv.Itoa(own.ProcPID), owner.Process, "sleep (pid " + strconv.Itoa(own.ProcPID) + ")"},
	}

	led := &ledger{last: map[string]uint64{}, inc: map[string]uint64{}}
	base, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range base.Counters {
		led.last[id] = v
	}
	before := make([]map[string]uint64, len(cases))
	for i, c := range cases {
		before[i] = snmp(t, c.h)
		netlab.ConnectRefusedIn(t, c.h, netip.MustParseAddrPort("127.0.0.1:9"), c.n)
	}
	// Collect until the evidence of every namespace has been read.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := src.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		led.add(r)
		seen := map[string]bool{}
		for _, e := range led.events {
			seen[e.GetFields()["netns"]] = true
		}
		all := true
		for _, c := range cases {
			all = all && seen[strconv.FormatUint(uint64(c.h.Inode), 10)]
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	sent := catalog.ResetSentReason("no_socket").ID
	recv := catalog.ResetReceivedState("syn_sent").ID
	for i, c := range cases {
		after := snmp(t, c.h)
		outRsts := after["Tcp.OutRsts"] - before[i]["Tcp.OutRsts"]
		fails := after["Tcp.AttemptFails"] - before[i]["Tcp.AttemptFails"]
		if outRsts != uint64(c.n) || fails != uint64(c.n) {
			t.Fatalf("%s: oracle TcpOutRsts +%d, TcpAttemptFails +%d, want %d each", c.label, outRsts, fails, c.n)
		}
		if got := led.inc[sent+"/"+c.id]; got != outRsts {
			t.Errorf("%s/%s = %d, TcpOutRsts +%d", sent, c.id, got, outRsts)
		}
		if got := led.inc[recv+"/"+c.id]; got != fails {
			t.Errorf("%s/%s = %d, TcpAttemptFails +%d", recv, c.id, got, fails)
		}
		inode := strconv.FormatUint(uint64(c.h.Inode), 10)
		n := 0
		for _, e := range led.events {
			f := e.GetFields()
			if f["netns"] != inode {
				continue
			}
			n++
			if f["owner"] != c.label || f["owner_kind"] != string(c.kind) {
				t.Errorf("%s: event %v", c.label, f)
			}
			if c.kind == owner.Pod && (f["pod"] != c.label || f["container"] != own.ContainerID || f["pod_uid"] != own.PodUID) {
				t.Errorf("%s: pod event %v", c.label, f)
			}
		}
		if n == 0 {
			t.Errorf("%s: no evidence", c.label)
		}
	}
	// The owner children and other add up to each parent exactly.
	for _, parent := range []string{sent, recv} {
		var sum uint64
		for id, v := range led.inc {
			if schema.Parent(id) == parent {
				sum += v
			}
		}
		if sum != led.inc[parent] {
			t.Errorf("%s grew %d, its owner children %d", parent, led.inc[parent], sum)
		}
		t.Logf("%s grew %d = its owner children's sum %d", parent, led.inc[parent], sum)
	}
}
