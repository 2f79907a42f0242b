// Package sourcetest holds what the sources' tests share: the agent's way
// of turning cumulative counters into increases, the kernel's own counters
// of a namespace as an oracle, and a lab whose namespaces have owners.
package sourcetest

import (
	"strconv"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/owner"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Ledger turns cumulative readings into increases as the agent's does: a
// counter seen first counts from 0, a retired one (and its subtree) is
// forgotten.
type Ledger struct {
	last map[string]uint64
	// Inc sums the increases of every reading added.
	Inc map[string]uint64
}

// NewLedger starts from a baseline reading's counters, as the agent
// starts from its first reading.
func NewLedger(base map[string]uint64) *Ledger {
	l := &Ledger{last: map[string]uint64{}, Inc: map[string]uint64{}}
	for id, v := range base {
		l.last[id] = v
	}
	return l
}

// Add takes one reading and returns its increases.
func (l *Ledger) Add(counters map[string]uint64, retired []string) map[string]uint64 {
	for _, r := range retired {
		for id := range l.last {
			if schema.Within(id, r) {
				delete(l.last, id)
			}
		}
	}
	inc := make(map[string]uint64, len(counters))
	for id, v := range counters {
		d := v - min(l.last[id], v)
		l.last[id] = v
		inc[id] = d
		l.Inc[id] += d
	}
	return inc
}

// Has says whether a counter is live (seen and not retired).
func (l *Ledger) Has(id string) bool {
	_, ok := l.last[id]
	return ok
}

// ChildSum sums the increases of parent's direct children in inc.
func ChildSum(inc map[string]uint64, parent string) (sum uint64, children int) {
	for id, v := range inc {
		if schema.Parent(id) == parent {
			sum += v
			children++
		}
	}
	return sum, children
}

// SNMP reads a namespace's /proc/net/snmp and snmp6 counters from inside
// it ("Tcp.OutRsts", "Udp.NoPorts"): the kernel's own, independent of any
// probe.
func SNMP(t testing.TB, h netns.Handle) map[string]uint64 {
	t.Helper()
	r := procnet.NewReader(h.ReadFile)
	c, err := r.SNMP()
	if err != nil {
		t.Fatal(err)
	}
	c6, err := r.SNMP6()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c6 {
		c[k] = v
	}
	return c
}

// Owned is one namespace of an owner lab, with what the agent must call
// its owner.
type Owned struct {
	H     netns.Handle
	ID    string // the owner's metric id segment
	Kind  owner.Kind
	Label string // the owner's name, as events carry it
}

// OwnerLab is a netlab lab whose namespaces have owners of three kinds
// (netlab.Own: a pod, an `ip netns` name, a process), a resolver that
// reads the pod's runtime files, and the agent's own namespace.
type OwnerLab struct {
	Lab      *netlab.Lab
	Own      *netlab.Owned
	Resolver *owner.Resolver
	Self     netns.Handle
	// Cases are the pod's namespace (A), the named one (B) and the
	// process's.
	Cases []Owned
}

// NewOwnerLab builds an OwnerLab, removed when the test ends.
func NewOwnerLab(t testing.TB) *OwnerLab {
	t.Helper()
	lab := netlab.New(t)
	own := lab.Own(t)
	l := &OwnerLab{Lab: lab, Own: own,
		Resolver: owner.New(owner.Options{RuntimeDirs: []string{own.RuntimeDir}, RescanEvery: 10 * time.Millisecond})}
	var err error
	if l.Self, err = netns.Resolve(""); err != nil {
		t.Fatal(err)
	}
	handle := func(name string) netns.Handle {
		h, err := netns.Resolve(name)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	pid := strconv.Itoa(own.ProcPID)
	l.Cases = []Owned{
		{handle(lab.A), "pod:shop." + own.PodName, owner.Pod, own.PodNamespace + "/" + own.PodName},
		{handle(lab.B), "netns:" + schema.Segment(lab.B), owner.Netns, lab.B},
		{own.Proc, "process:sleep." + pid, owner.Process, "sleep (pid " + pid + ")"},
	}
	return l
}

// Collect calls collect until the evidence of every case's namespace has
// been read (5 s at most), adding each reading to led, and returns the
// events. collect returns a reading's counters, retired ids and events.
func (l *OwnerLab) Collect(t testing.TB, led *Ledger, collect func() (map[string]uint64, []string, []*nbsv1.Event)) []*nbsv1.Event {
	t.Helper()
	var events []*nbsv1.Event
	deadline := time.Now().Add(5 * time.Second)
	for {
		counters, retired, evs := collect()
		led.Add(counters, retired)
		events = append(events, evs...)
		seen := map[string]bool{}
		for _, e := range events {
			seen[e.GetFields()["netns"]] = true
		}
		all := true
		for _, c := range l.Cases {
			all = all && seen[strconv.FormatUint(uint64(c.H.Inode), 10)]
		}
		if all || time.Now().After(deadline) {
			return events
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CheckEvents checks that c's namespace has evidence under metric and
// that every such event names c's owner (and, for the pod, its container).
func (l *OwnerLab) CheckEvents(t testing.TB, events []*nbsv1.Event, c Owned, metric string) {
	t.Helper()
	inode := strconv.FormatUint(uint64(c.H.Inode), 10)
	n := 0
	for _, e := range events {
		f := e.GetFields()
		if f["netns"] != inode || e.GetMetricId() != metric {
			continue
		}
		n++
		if f["owner"] != c.Label || f["owner_kind"] != string(c.Kind) {
			t.Errorf("%s: event %v", c.Label, f)
		}
		if c.Kind == owner.Pod && (f["pod"] != c.Label || f["container"] != l.Own.ContainerID || f["pod_uid"] != l.Own.PodUID) {
			t.Errorf("%s: pod event %v", c.Label, f)
		}
	}
	if n == 0 {
		t.Errorf("%s: no evidence under %s", c.Label, metric)
	}
}

// CheckSum checks that parent's owner children grew exactly as it did.
func CheckSum(t testing.TB, led *Ledger, parent string) {
	t.Helper()
	sum, _ := ChildSum(led.Inc, parent)
	t.Logf("%s grew %d = its owner children's sum %d", parent, led.Inc[parent], sum)
	if sum != led.Inc[parent] {
		t.Errorf("%s grew %d, its owner children %d", parent, led.Inc[parent], sum)
	}
}
