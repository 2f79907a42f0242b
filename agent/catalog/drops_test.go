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
