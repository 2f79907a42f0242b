package flows

import (
	"strings"
	"testing"
	"time"
)

// The state rules of docs/flow-map.md, at and around each threshold.
func TestState(t *testing.T) {
	r := func(n uint64) map[string]uint64 { return map[string]uint64{"no_socket": n} }
	cases := []struct {
		name    string
		f       Figures
		window  time.Duration
		state   string
		explain string
	}{
		{"quiet", Figures{Opened: 100, Bytes: 1 << 20}, 5 * time.Minute, "ok", ""},
		{"one reset", Figures{Opened: 100, ServerSent: r(1)}, 5 * time.Minute, "warn", "1 resets in 5m: most sent by the server (no_socket: 1)"},
		{"9 resets in 5m", Figures{ServerSent: r(9)}, 5 * time.Minute, "warn", "9 resets in 5m"},
		{"10 resets in 5m", Figures{ServerSent: r(10)}, 5 * time.Minute, "crit", "10 resets in 5m (crit from 10): most sent by the server (no_socket: 10)"},
		{"10 resets in 1m count as in 5m", Figures{ClientReceived: r(10)}, time.Minute, "crit", "10 resets in 1m (crit from 10)"},
		{"10 resets in 1h are few", Figures{ServerSent: r(10)}, time.Hour, "warn", "10 resets in 1h"},
		{"120 resets in 1h", Figures{ServerSent: r(120)}, time.Hour, "crit", "120 resets in 1h (crit from 120)"},
		// Both ends counting the same resets are not twice as many.
		{"one reset seen at both ends", Figures{ServerSent: r(6), ClientReceived: r(6)}, 5 * time.Minute, "warn", "6 resets in 5m"},
		{"4 failed of 10", Figures{Opened: 6, Failed: 4}, 5 * time.Minute, "warn", "4 of 10 connects failed in 5m"},
		{"5 failed of 50", Figures{Opened: 45, Failed: 5}, 5 * time.Minute, "crit", "5 of 50 connects failed in 5m (10%; crit from 10% and 5)"},
		{"5 failed of 51", Figures{Opened: 46, Failed: 5}, 5 * time.Minute, "warn", "5 of 51 connects failed"},
		{"a drop", Figures{Opened: 1, ClientDrops: map[string]uint64{"netfilter": 2}, ServerDrops: map[string]uint64{"socket_filter": 1}}, 5 * time.Minute,
			"warn", "3 packets dropped in 5m, most by the client (netfilter: 2)"},
		// A socket's queues freed as it closes, duplicates discarded: common
		// in healthy traffic (the drops tree's high thresholds).
		{"healthy-traffic drops", Figures{Opened: 1, ClientDrops: map[string]uint64{"queue_purge": 1}, ServerDrops: map[string]uint64{"socket_close": 3, "tcp_old_data": 12}}, 5 * time.Minute, "ok", ""},
		{"a drop beside teardown", Figures{Opened: 1, ClientDrops: map[string]uint64{"queue_purge": 9, "netfilter_drop": 1}}, 5 * time.Minute,
			"warn", "1 packets dropped in 5m, most by the client (netfilter_drop: 1)"},
		{"4 retransmits", Figures{Retransmits: 4}, 5 * time.Minute, "ok", ""},
		{"5 retransmits of 400 segments", Figures{Retransmits: 5, Bytes: 400 * SegmentBytes}, 5 * time.Minute, "warn", "5 retransmits in 5m (1.2% of about 400 segments; warn from 1%)"},
		{"5 retransmits of 600 segments", Figures{Retransmits: 5, Bytes: 600 * SegmentBytes}, 5 * time.Minute, "ok", ""},
		{"resets before failures", Figures{Opened: 1, Failed: 9, ServerSent: r(20)}, 5 * time.Minute, "crit", "20 resets in 5m"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state, explain := State(c.f, c.window)
			if state != c.state || !strings.HasPrefix(explain, c.explain) || (c.explain == "") != (explain == "") {
				t.Fatalf("State = %s %q, want %s %q", state, explain, c.state, c.explain)
			}
		})
	}
}

func TestParseKey(t *testing.T) {
	k := edgeKey("o:n1|pod:shop.cart-1", "a:10.0.0.2", 5432, "acme")
	c, s, p, err := parseKey(k)
	if err != nil || c != "o:n1|pod:shop.cart-1" || s != "a:10.0.0.2" || p != 5432 {
		t.Fatalf("parseKey(%s) = %q %q %d %v", k, c, s, p, err)
	}
	for _, bad := range []string{"", "!!", "WzEsMl0", "WyJhIiwiYiIsNzAwMDBd", edgeKey("a", "b", 80, "")[:15]} {
		if _, _, _, err := parseKey(bad); err == nil {
			t.Errorf("parseKey(%q) accepted", bad)
		}
	}
}
