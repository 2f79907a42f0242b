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
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/sourcetest"
	"github.com/nbs-project/nbs/internal/netlab"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

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

	base, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	led := sourcetest.NewLedger(base.Counters)
	var events []*nbsv1.Event
	before := make([]map[string]uint64, len(cases))
	for i, c := range cases {
		before[i] = sourcetest.SNMP(t, c.h)
		netlab.ConnectRefusedIn(t, c.h, netip.MustParseAddrPort("127.0.0.1:9"), c.n)
	}
	// Collect until the evidence of every namespace has been read.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := src.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		led.Add(r.Counters, r.Retired)
		events = append(events, r.Events...)
		seen := map[string]bool{}
		for _, e := range events {
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
		after := sourcetest.SNMP(t, c.h)
		outRsts := after["Tcp.OutRsts"] - before[i]["Tcp.OutRsts"]
		fails := after["Tcp.AttemptFails"] - before[i]["Tcp.AttemptFails"]
		if outRsts != uint64(c.n) || fails != uint64(c.n) {
			t.Fatalf("%s: oracle TcpOutRsts +%d, TcpAttemptFails +%d, want %d each", c.label, outRsts, fails, c.n)
		}
		if got := led.Inc[sent+"/"+c.id]; got != outRsts {
			t.Errorf("%s/%s = %d, TcpOutRsts +%d", sent, c.id, got, outRsts)
		}
		if got := led.Inc[recv+"/"+c.id]; got != fails {
			t.Errorf("%s/%s = %d, TcpAttemptFails +%d", recv, c.id, got, fails)
		}
		inode := strconv.FormatUint(uint64(c.h.Inode), 10)
		n := 0
		for _, e := range events {
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
		sum, _ := sourcetest.ChildSum(led.Inc, parent)
		if sum != led.Inc[parent] {
			t.Errorf("%s grew %d, its owner children %d", parent, led.Inc[parent], sum)
		}
		t.Logf("%s grew %d = its owner children's sum %d", parent, led.Inc[parent], sum)
	}
}
