package api_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

var customer = access.Principal{Name: "acme", Role: access.RoleCustomer, Selector: access.Selector{"customer": "acme"}}

// TestStaffMetricSQL: the SQL form of the staff-only metrics (what alert
// lists and their counts filter on) is the Go form, path for path.
func TestStaffMetricSQL(t *testing.T) {
	st := storetest.Open(t)
	paths := []string{
		"agent", "agent/bpf/drops", "agent/backlog", "agents", "agentx/bpf", "tcp_reset", "tcp_reset/sent",
		"tcp_reset/sent/process:sleep.42", "drops/no_socket/inode:4026532177", "drops/x/netns:blue", "drops/x/netns:blue/y",
		"tcp_reset/sent/pod:shop.cart-1", "tcp_reset/sent/container:3f2a1b2c3d4e", "tcp_reset/sent/host",
		"ping/agent", "ping/agent/lost", "latency/rx/process_time", "x/myprocess:1", "x/yprocess:1/z", "netns:a",
	}
	for _, p := range paths {
		var got bool
		if err := st.Pool().QueryRow(context.Background(), `SELECT `+api.StaffMetricSQL("$1::text"), p).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := api.StaffMetric(p); got != want {
			t.Errorf("%s: SQL says staff-only %v, Go %v", p, got, want)
		}
	}
	// Both say something: some of each.
	if n := len(slices.DeleteFunc(slices.Clone(paths), api.StaffMetric)); n == 0 || n == len(paths) {
		t.Fatalf("%d of %d paths are customers': the table tests nothing", n, len(paths))
	}
}

// TestCustomerCapabilities: a customer is told what it loses when a
// capability is missing, once per topic, in its words; never the agent's
// reason (host paths, kernel capabilities, flags), nor the agent's own
// capabilities. Staff see every capability as the agent said it.
func TestCustomerCapabilities(t *testing.T) {
	caps := []store.Capability{
		{Name: "owner.oci_bundles", Available: false, Reason: "cannot read /proc/1/root/run/containerd/io.containerd.runtime.v2.task: give the agent the host's PID namespace and CAP_SYS_PTRACE"},
		{Name: "bpf.pinning", Available: false, Reason: "--bpf.pin-dir=none: an agent restart loses what the probes counted"},
		{Name: "bpf.stats", Available: true, Reason: "kernel.bpf_stats_enabled was already 1"},
		{Name: "bpf.drops", Available: false, Reason: "disabled by --bpf=false"},
		{Name: "proc.drops", Available: true, Reason: "UDP no-port drops from /proc/net/snmp of the namespace blue"},
		{Name: "bpf.latency.tx", Available: false, Reason: "needs Linux 6.15"},
		{Name: "bpf.latency.rx", Available: false, Reason: "needs Linux 6.15"},
		{Name: "bpf.future", Available: false, Reason: "/sys/fs/bpf/nbs is not on bpffs"},
		{Name: "bpf.other_future", Available: false, Reason: "CAP_BPF missing"},
	}
	got := api.ViewFor(customer).Capabilities(slices.Clone(caps))
	want := []string{"pod_names", "drop_reasons", "send_latency", "receive_latency", "measurements"}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
		if c.Available || c.Reason == "" {
			t.Errorf("%+v: a customer is told of missing capabilities, each with what it loses", c)
		}
		for _, bad := range []string{"/", "CAP_", "--", "bpf", "netns", "namespace", "proc"} {
			if strings.Contains(strings.ToLower(c.Name+" "+c.Reason), strings.ToLower(bad)) {
				t.Errorf("%+v: a customer is told %q", c, bad)
			}
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("a customer is told of %v, want %v", names, want)
	}
	if staff := api.ViewFor(access.Principal{Role: access.RoleViewer}).Capabilities(slices.Clone(caps)); !slices.Equal(staff, caps) {
		t.Errorf("staff see %+v, want every capability as the agent said it", staff)
	}
}
