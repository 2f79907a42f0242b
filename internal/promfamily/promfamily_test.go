package promfamily

import (
	"regexp"
	"slices"
	"testing"
)

var validName = regexp.MustCompile(`^nbs_[a-z0-9_]+$`)

func TestFamiliesAreWellFormed(t *testing.T) {
	r := New()
	seen := map[string]bool{}
	for _, f := range r.Families() {
		if seen[f.Name] {
			t.Errorf("family %s twice", f.Name)
		}
		seen[f.Name] = true
		if !validName.MatchString(f.Name) || f.Help == "" {
			t.Errorf("family %q: bad name or no help", f.Name)
		}
		if (f.Type == Counter) != (len(f.Name) > 6 && f.Name[len(f.Name)-6:] == "_total") {
			t.Errorf("family %s: a counter's name ends in _total, nothing else's does", f.Name)
		}
		for _, l := range f.Labels {
			if slices.Contains([]string{"node", "tenant", "__name__", "le"}, l) {
				t.Errorf("family %s: label %s is reserved", f.Name, l)
			}
		}
	}
}

func TestLookup(t *testing.T) {
	r := New()
	for _, c := range []struct {
		path     string
		kind     Kind
		quantile float64
		family   string
		values   []string
		scale    float64
	}{
		{"tcp_reset", Rate, 0, "nbs_tcp_resets_total", []string{"", ""}, 1},
		{"tcp_reset/received/syn_sent", Rate, 0, "nbs_tcp_resets_total", []string{"received", "syn_sent"}, 1},
		{"tcp_reset/sent/no_socket/ns-web", Rate, 0, "nbs_tcp_resets_by_owner_total", []string{"sent", "no_socket", "ns-web"}, 1},
		{"drops/conntrack/usage", GaugeKind, 0, "nbs_conntrack_usage_ratio", []string{}, 0.01},
		{"drops/conntrack/insert_failed", Rate, 0, "nbs_conntrack_events_total", []string{"insert_failed"}, 1},
		{"drops/device/rx_missed/eth0", Rate, 0, "nbs_device_drops_by_device_packets_total", []string{"rx_missed", "eth0"}, 1},
		{"drops/netfilter_drop/pod-a", Rate, 0, "nbs_drops_by_owner_packets_total", []string{"netfilter_drop", "pod-a"}, 1},
		{"ping/db-1", Histogram, 0.99, "nbs_ping_rtt_seconds", []string{"db-1", "0.99"}, 0.001},
		{"ping/db-1/host_delay/qdisc", Histogram, 0.5, "nbs_ping_host_delay_seconds", []string{"db-1", "qdisc", "0.5"}, 0.001},
		{"ping/clock", GaugeKind, 0, "nbs_ping_clock_synced", []string{}, 1},
		{"latency/rx/stack/tcp", Histogram, 0.99, "nbs_rx_latency_seconds", []string{"stack", "tcp", "0.99"}, 0.001},
		{"dns/latency", Histogram, 0.99, "nbs_dns_latency_seconds", []string{"0.99"}, 0.001},
		{"dns/errors/servfail/pod:shop.cart", Rate, 0, "nbs_dns_error_answers_by_owner_total", []string{"servfail", "pod:shop.cart"}, 1},
		{"dns/servers/10.96.0.10/timeouts", Rate, 0, "nbs_dns_server_timeouts_total", []string{"10.96.0.10"}, 1},
		{"dns/clients", Rate, 0, "nbs_dns_queries_by_owner_total", []string{""}, 1},
		{"agent/bpf/tcp_send_reset/ns_per_run", GaugeKind, 0, "nbs_agent_bpf_run_seconds", []string{"tcp_send_reset"}, 1e-9},
		// What no rule names, and a kind an agent got wrong, go to the
		// generic families: a family's type never changes.
		{"quic/latency", Histogram, 0.99, "nbs_tree_value", []string{"quic/latency", "ms", "0.99"}, 1},
		{"tcp_reset", GaugeKind, 0, "nbs_tree_value", []string{"tcp_reset", "ms", ""}, 1},
		{"ping/db-1", Rate, 0, "nbs_tree_increase_total", []string{"ping/db-1"}, 1},
	} {
		m := r.Lookup(c.path, c.kind, "ms", c.quantile)
		if m.Family.Name != c.family || !slices.Equal(m.Values, c.values) || m.Scale != c.scale {
			t.Errorf("Lookup(%s, %v) = %s %q ×%g, want %s %q ×%g", c.path, c.kind, m.Family.Name, m.Values, m.Scale, c.family, c.values, c.scale)
		}
	}
}
