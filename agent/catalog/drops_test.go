package catalog

import (
	"strings"
	"testing"
)

func TestDropReasons(t *testing.T) {
	if m := DropReason("not_specified"); m.Threshold != nil || m.ID != DropsNotSpecified {
		t.Errorf("not_specified: %+v, want %s with no default threshold", m, DropsNotSpecified)
	}
	nf := DropReason("netfilter_drop")
	if nf.ID != "drops/netfilter_drop" || nf.Threshold == nil || nf.Threshold.Hold != 1 || !strings.Contains(nf.Description, "nft") {
		t.Errorf("netfilter_drop: %+v", nf)
	}
	// A reason this catalogue has never heard of (a newer kernel) still
	// gets a definition, a generic description and a threshold.
	u := DropReason("brand_new_reason")
	if u.Threshold == nil || !strings.Contains(u.Description, "SKB_DROP_REASON_BRAND_NEW_REASON") || u.Unit != "packets/s" || u.Kind != Rate {
		t.Errorf("unknown reason: %+v", u)
	}
	for reason := range dropReasonHelp {
		m := DropReason(reason)
		if m.Parent() != Drops || len(m.Description) < 40 {
			t.Errorf("%s: %+v", reason, m)
		}
	}
	if o := DropOverflow(); o.ID != DropsOverflow || o.Parent() != Drops {
		t.Errorf("overflow: %+v", o)
	}
	seen := map[string]bool{}
	for _, pc := range DropProcCounters() {
		if pc.Metric.Parent() != Drops || seen[pc.Metric.ID] || (len(pc.Counters) == 0) != pc.HostWide {
			t.Errorf("fallback %+v", pc)
		}
		seen[pc.Metric.ID] = true
	}
	root := DropsTree()
	if len(root) != 1 || root[0].ID != Drops || root[0].Threshold != nil {
		t.Errorf("DropsTree() = %+v", root)
	}
}

func TestConntrackDeviceCatalog(t *testing.T) {
	thresholds := map[string]*Threshold{}
	for _, m := range append(ConntrackTree(), DeviceTree()...) {
		if len(m.Description) < 100 || m.Title == "" || m.Unit == "" || m.Kind == 0 {
			t.Errorf("%s: %+v", m.ID, m)
		}
		if p := m.Parent(); p != Drops && p != DropsConntrack && p != DropsDevice {
			t.Errorf("%s: parent %s", m.ID, p)
		}
		thresholds[m.ID] = m.Threshold
	}
	// Roots and the entry count have none: their children judge.
	for _, id := range []string{DropsConntrack, DropsDevice, DropsConntrackEntries} {
		if thresholds[id] != nil {
			t.Errorf("%s has a default threshold %+v", id, thresholds[id])
		}
	}
	if u := thresholds[DropsConntrackUsage]; u == nil || u.Warn != 80 || u.Crit != 95 {
		t.Errorf("usage threshold %+v, want warn 80%% crit 95%%", u)
	}
	// One drop in an interval of up to 1000 s is WARN.
	for _, id := range []string{DropsConntrackDrop, DropsConntrackInsertFailed, DropsConntrackEarlyDrop} {
		if thr := thresholds[id]; thr == nil || thr.Warn > 0.001 || thr.Warn <= 0 {
			t.Errorf("%s threshold %+v", id, thr)
		}
	}
	kernel := map[string]bool{}
	for _, c := range DeviceCounters() {
		if c.Metric.Threshold == nil || kernel[c.Kernel] || !strings.Contains(c.Metric.Description, c.Kernel) {
			t.Errorf("%s (%s): %+v", c.Metric.ID, c.Kernel, c.Metric)
		}
		kernel[c.Kernel] = true
		d := DeviceChild(c.Metric, "eth0", "eth0")
		if d.Parent() != c.Metric.ID || d.Threshold != c.Metric.Threshold || !strings.Contains(d.Description, "eth0") {
			t.Errorf("device child %+v", d)
		}
	}
}
