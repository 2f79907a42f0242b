package perdevice

import (
	"slices"
	"testing"

	"github.com/nbs-project/nbs/agent/probe/devtable"
)

func TestIDsAssign(t *testing.T) {
	const own = 100
	ids := NewIDs(own, 4)
	for _, tc := range []struct {
		name  string
		netns uint32
		want  string
	}{
		{"eth0", own, "eth0"},
		{"eth0", 200, "eth0.ns200"}, // another namespace's device is qualified
		{"ETH0", own, "eth0.2"},     // differs only in case: suffixed
		{"eth0", own, "eth0.3"},     // reused name (a new ifindex)
		{"lo", own, ""},             // the bound: counted in the parent only
		{"eth0", 200, ""},           // still bound
	} {
		if got := ids.Assign(tc.name, tc.netns); got != tc.want {
			t.Errorf("Assign(%q, %d) = %q, want %q", tc.name, tc.netns, got, tc.want)
		}
	}
	ids.Release("eth0.2")
	if got := ids.Assign("lo", own); got != "lo" {
		t.Errorf("after a release Assign(lo) = %q, want lo", got)
	}
	if got := ids.Assign("ETH0", own); got != "" {
		t.Errorf("bound again: Assign = %q, want none", got)
	}
	ids.Reset()
	if got := ids.Assign("eth0", own); got != "eth0" {
		t.Errorf("after Reset Assign(eth0) = %q, want eth0", got)
	}
	for _, tc := range []struct{ netns, want uint32 }{{own, 0}, {200, 200}} {
		if got := ids.Netns(tc.netns); got != tc.want {
			t.Errorf("Netns(%d) = %d, want %d", tc.netns, got, tc.want)
		}
	}
}

// A device's child comes with its first packets, stays while idle up to
// the limit, retires after, and comes back with packets; a retired child's
// id goes to a device waiting for one.
func TestDevicesChildren(t *testing.T) {
	const own, idle = 7, 2
	a := devtable.Device{Netns: own, Ifindex: 2, Name: "a"}
	b := devtable.Device{Netns: 9, Ifindex: 3, Name: "b"}
	ds := NewDevices[int](own, 1, idle)
	type step struct {
		d      devtable.Device
		active bool
		want   Child
	}
	for i, s := range []step{
		{a, false, Child{}},                       // no packet yet: no child
		{a, true, Child{ID: "a"}},                 // named by its first packets
		{b, true, Child{}},                        // the bound: b counts in the parent
		{a, false, Child{ID: "a"}},                // idle 1
		{a, false, Child{ID: "a"}},                // idle 2: still there
		{a, false, Child{ID: "a", Retired: true}}, // idle 3: retired
		{a, false, Child{}},                       // gone
		{b, true, Child{ID: "b.ns9", Netns: 9}},   // b takes the freed place
		{a, true, Child{}},                        // a back, but the bound is b's now
	} {
		if got := ds.Next(s.d, s.active); got != s.want {
			t.Errorf("step %d: Next(%s, %v) = %+v, want %+v", i, s.d.Name, s.active, got, s.want)
		}
	}
	*ds.State(a) = 5
	if got := *ds.State(a); got != 5 {
		t.Errorf("State kept %d, want 5", got)
	}
	ds.Reset()
	if got := *ds.State(a); got != 0 {
		t.Errorf("State after Reset = %d, want 0", got)
	}
	if got := ds.Next(a, true); got != (Child{ID: "a"}) {
		t.Errorf("after Reset Next(a) = %+v, want its child back", got)
	}
}

func TestSorted(t *testing.T) {
	m := map[devtable.Device]bool{
		{Netns: 2, Ifindex: 1}: true,
		{Netns: 1, Ifindex: 5}: true,
		{Netns: 1, Ifindex: 3}: true,
	}
	want := []devtable.Device{{Netns: 1, Ifindex: 3}, {Netns: 1, Ifindex: 5}, {Netns: 2, Ifindex: 1}}
	if got := Sorted(m); !slices.Equal(got, want) {
		t.Errorf("Sorted = %v, want %v", got, want)
	}
}
