package catalog

import "testing"

func TestRcodeName(t *testing.T) {
	for rcode, want := range map[uint8]string{0: "noerror", 2: "servfail", 3: "nxdomain", 5: "refused", 10: "notzone", 11: "rcode_11", 15: "rcode_15"} {
		if got := RcodeName(rcode); got != want {
			t.Errorf("RcodeName(%d) = %q, want %q", rcode, got, want)
		}
	}
}

// Every DNS metric id is a valid metric id, and the failing codes carry a
// threshold while NXDOMAIN, normal under search domains, does not.
func TestDNSThresholds(t *testing.T) {
	for name, want := range map[string]bool{"servfail": true, "refused": true, "nxdomain": false, "formerr": false} {
		if got := DNSRcode(name).Threshold != nil; got != want {
			t.Errorf("%s has a threshold: %v, want %v", name, got, want)
		}
	}
	if m := DNSMetric(DNSTimeouts); m.ID != DNSTimeouts || m.Threshold == nil {
		t.Errorf("DNSMetric(%s) = %+v", DNSTimeouts, m)
	}
	if m := DNSMetric("dns/nope"); m.ID != "" {
		t.Errorf("DNSMetric of an unknown id = %+v", m)
	}
}
