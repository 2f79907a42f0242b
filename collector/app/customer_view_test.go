package app

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
)

// machinery is what the operator's side of a node looks like in the
// fleet's data after addMachinery: each marker is in some answer staff get,
// and in no answer a customer gets.
var machinery = []struct{ what, marker string }{
	{"the agent's own root", "agent/"},
	{"a host path in a capability reason", "/proc/1/root/run/containerd"},
	{"a kernel capability in advice", "CAP_SYS_PTRACE"},
	{"the BPF pin directory", "/sys/fs/bpf/nbs"},
	{"a network namespace's name", "blue-ns-secret"},
	{"the namespace-name evidence field", "netns_name"},
	{"a network namespace's inode", "4026532177"},
	{"a process's command", "secretcomm"},
}

// machineryIDs are the objects addMachinery makes that the test asks for
// by id.
type machineryIDs struct {
	agentAlert, childAlert, definition int64
}

// addMachinery gives the fleet what a real agent reports of itself and of
// the host: the agent root with BPF program children (raised, and an alert
// on it), owner children of a process and of a named namespace (an alert
// explained by one), evidence naming the namespace, its inode and a
// process, on acme-web and on a second acme node that saw the same flow (a
// counterpart a customer may see), capabilities whose reasons hold host
// paths and advice, a global override and a report objective of an agent
// metric.
func (f *fleet) addMachinery() machineryIDs {
	f.t.Helper()
	ctx := context.Background()
	st := f.st
	now := time.Now().Truncate(time.Millisecond)
	caps := []store.Capability{
		{Name: "owner.oci_bundles", Available: false, Reason: "cannot read /proc/1/root/run/containerd/io.containerd.runtime.v2.task: pods are named by their hostname; give the agent the host's PID namespace and CAP_SYS_PTRACE, or mount the runtime's directory under /run"},
		{Name: "bpf.pinning", Available: true, Reason: "tcp_reset and drops counters and programs are pinned in /sys/fs/bpf/nbs: they go on counting while no agent runs"},
		{Name: "proc.drops", Available: true, Reason: "UDP drops from /proc/net/snmp of the namespace blue-ns-secret"},
		{Name: "bpf.drops", Available: false, Reason: "disabled by --bpf=false"},
	}
	thr := &store.Threshold{Warn: 1, Crit: 10, Comparison: "above", HoldIntervals: 1}
	var ids machineryIDs
	for i, n := range []store.Node{
		{Name: "acme-web", Labels: map[string]string{"customer": "acme", "rack": "r1"}, InstanceID: 1, IntervalMS: 1000, AgentVersion: "acme-agent"},
		{Name: "acme-db", Labels: map[string]string{"customer": "acme", "rack": "r2"}, InstanceID: 3, IntervalMS: 1000, AgentVersion: "acme-agent"},
	} {
		n.Capabilities = caps
		id, err := st.UpsertNode(ctx, n)
		if err != nil {
			f.t.Fatal(err)
		}
		defs, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{
			{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
			{Path: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
			{Path: "tcp_reset/sent/process:secretcomm.4242", Title: "Sent by process secretcomm (pid 4242)", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
			{Path: "tcp_reset/sent/netns:blue-ns-secret", Title: "Sent in netns blue-ns-secret", Unit: "resets/s", Kind: store.KindRate, DefaultThreshold: thr},
			{Path: "agent", Title: "Agent overhead", Unit: "% of a CPU", Kind: store.KindGauge, DefaultThreshold: thr},
			{Path: "agent/bpf/drops", Title: "BPF program drops", Unit: "% of a CPU", Kind: store.KindGauge, DefaultThreshold: thr},
		})
		if err != nil {
			f.t.Fatal(err)
		}
		sample := func(path string, v float64) store.Sample {
			return store.Sample{MetricID: defs[path], Path: path, Value: v, State: store.StateCrit}
		}
		ev := func(path string, fields map[string]string) store.Event {
			return store.Event{MetricID: defs[path], Path: path, Time: now.Add(-time.Second), Fields: fields}
		}
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, InstanceID: n.InstanceID, Seq: uint64(10 + i), Time: now, IntervalMS: 1000,
			Samples: []store.Sample{sample("tcp_reset", 20), sample("tcp_reset/sent", 20), sample("tcp_reset/sent/process:secretcomm.4242", 12),
				sample("tcp_reset/sent/netns:blue-ns-secret", 8), sample("agent", 30), sample("agent/bpf/drops", 30)},
			Events: []store.Event{
				// One flow seen from both acme nodes: each is the other's
				// counterpart, and acme may see both.
				ev("tcp_reset/sent", map[string]string{"reason": "no_socket", "src": "198.51.100.7:443", "dst": "198.51.100.8:40000",
					"owner": "blue-ns-secret", "owner_kind": "netns", "netns_name": "blue-ns-secret", "netns": "4026532177",
					"owner_id": "netns:blue-ns-secret", "pid": "4242", "comm": "secretcomm"}),
				ev("agent/bpf/drops", map[string]string{"program": "nbs_drops_kfree_skb"}),
			},
		}}); err != nil {
			f.t.Fatal(err)
		}
		if n.Name != "acme-web" {
			continue
		}
		alert := func(fp, metric, child, summary string) int64 {
			var aid int64
			if err := st.Pool().QueryRow(ctx, `INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, node_id, node,
					metric, child, state, since, last_ts, fired_at, labels, annotations)
				VALUES ($1, 1, 'NBSRootCritical', 'node', 'critical', $2, 'acme-web', $3, $4, 'firing', now(), now(), now(),
					jsonb_build_object('node', 'acme-web', 'customer', 'acme', 'metric', $4::text),
					jsonb_build_object('summary', $5::text, 'description', $5::text)) RETURNING id`,
				fp, id, metric, child, summary).Scan(&aid); err != nil {
				f.t.Fatal(err)
			}
			return aid
		}
		ids.agentAlert = alert("fp-agent", "agent", "agent/bpf/drops", "agent is CRIT on acme-web: agent/bpf/drops at 30 % of a CPU")
		ids.childAlert = alert("fp-process", "tcp_reset", "tcp_reset/sent/process:secretcomm.4242",
			"tcp_reset is CRIT on acme-web: tcp_reset/sent/process:secretcomm.4242 at 12 resets/s")
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO threshold_overrides (scope_kind, selector, node, metric, disabled)
		VALUES ('global', '{}', '', 'agent/bpf/drops', true)`); err != nil {
		f.t.Fatal(err)
	}
	ids.definition = f.create("POST", "/report-definitions", `{"name":"acme with the agent","selector":{"customer":"acme"},"period":"1d",
		"objectives":[{"name":"agent p99","metric":"agent/bpf/drops","quantile":0.99,"below_ms":5,"per":"hour"},
		{"name":"ping p99","metric":"ping","quantile":0.99,"below_ms":5,"per":"hour"}]}`, 201)
	return ids
}

// TestCustomerSeesNoMachinery calls every route a customer may read, as
// the access test's table calls it (so a new route is covered once it is
// there), and the variants that reach the operator's side (a staff-only
// metric asked by name, CSV, a saved definition), as a customer and as
// staff: no customer answer holds any of machinery, and staff's answers
// hold every one, so the check proves something.
func TestCustomerSeesNoMachinery(t *testing.T) {
	f := newFleet(t, access.Config{})
	ids := f.addMachinery()
	p := api.Prefix
	from := queryTime(time.Now().Add(-time.Hour))
	// Asked of a metric or an object the customer may not see, the answer
	// is what one that does not exist gets (what was asked is echoed in
	// both).
	hiddenAs := map[string]string{
		p + "/nodes/acme-web/series?metric=agent/bpf/drops":                        p + "/nodes/acme-web/series?metric=nosuch/bpf/drops",
		p + "/nodes/acme-web/series?metric=agent":                                  p + "/nodes/acme-web/series?metric=nosuch",
		p + "/nodes/acme-web/series?metric=tcp_reset/sent/process:secretcomm.4242": p + "/nodes/acme-web/series?metric=tcp_reset/sent/nosuch",
		p + "/nodes/acme-web/events?metric=agent/bpf/drops":                        p + "/nodes/acme-web/events?metric=nosuch/bpf/drops",
		p + "/nodes/acme-web/events?metric=tcp_reset/sent/netns:blue-ns-secret":    p + "/nodes/acme-web/events?metric=tcp_reset/sent/nosuch",
		fmt.Sprintf("%s/alerts/%d", p, ids.agentAlert):                             p + "/alerts/987654321",
	}
	variants := []string{
		p + "/nodes/acme-web/series/batch?metric=agent/bpf/drops&metric=tcp_reset&metric=tcp_reset/sent/process:secretcomm.4242",
		p + "/nodes/acme-web/events?metric=tcp_reset/sent",
		p + "/nodes/acme-web/events?metric=tcp_reset",
		p + "/nodes/acme-web/tree?window=1h",
		p + "/nodes/acme-web/tree?from=" + from,
		p + "/nodes/acme-db",
		p + "/nodes/acme-db/tree",
		p + "/nodes/acme-db/thresholds",
		p + "/alerts?state=all&limit=1000",
		p + "/alerts?state=firing&node=acme-web",
		fmt.Sprintf("%s/alerts/%d", p, ids.childAlert),
		p + "/reports?format=csv&selector=customer%3Dacme",
		p + "/reports?selector=customer%3Dacme&from=" + from,
		fmt.Sprintf("%s/reports?definition=%d", p, ids.definition),
		fmt.Sprintf("%s/reports?definition=%d&format=csv", p, ids.definition),
		fmt.Sprintf("%s/report-definitions/%d", p, ids.definition),
		p + "/fleet?sort=name",
	}
	for path := range hiddenAs {
		variants = append(variants, path)
	}
	// Every route of the table a customer may read, as the table calls it.
	var paths []string
	calls := accessCalls(f)
	for _, route := range f.routes() {
		method, pattern, _ := strings.Cut(route, " ")
		c, ok := calls[route]
		if method != "GET" || !ok || !strings.HasPrefix(pattern, p+"/") || c.want[acme] != 200 {
			continue
		}
		paths = append(paths, c.path(acme))
	}
	if len(paths) < 15 {
		t.Fatalf("only %d routes a customer may read: %v", len(paths), paths)
	}
	paths = append(paths, variants...)

	seenByStaff := map[string]bool{}
	for _, path := range paths {
		code, _, body := f.do(acme, "GET", path, "")
		if missing, ok := hiddenAs[path]; ok {
			mc, _, mb := f.do(acme, "GET", missing, "")
			if code != mc || echoed.ReplaceAllString(body, "X") != echoed.ReplaceAllString(mb, "X") {
				t.Errorf("acme: GET %s: %d %.300s\nbut GET %s: %d %.300s\nwant the same answer", path, code, body, missing, mc, mb)
			}
		} else {
			if code != 200 {
				t.Errorf("acme: GET %s: %d %.300s", path, code, body)
			}
			for _, m := range machinery {
				if strings.Contains(body, m.marker) {
					t.Errorf("acme: GET %s shows %s (%q): %.600s", path, m.what, m.marker, around(body, m.marker))
				}
			}
		}
		code, _, body = f.do(viewer, "GET", path, "")
		if code != 200 {
			t.Errorf("viewer: GET %s: %d %.300s", path, code, body)
		}
		for _, m := range machinery {
			if strings.Contains(body, m.marker) {
				seenByStaff[m.marker] = true
			}
		}
	}
	for _, m := range machinery {
		if !seenByStaff[m.marker] {
			t.Errorf("no staff answer shows %s (%q): the fixture does not put it where a customer could see it", m.what, m.marker)
		}
	}

	// What a customer does see of the same things, in its words.
	checks := []struct{ path, want string }{
		{p + "/nodes/acme-web", `"pod_names"`},
		{p + "/nodes/acme-web", "without container names"},
		{p + "/nodes", `"drop_reasons"`},
		{p + "/nodes/acme-web/events?metric=tcp_reset/sent", `"reason": "no_socket"`},
		{p + "/nodes/acme-web/events?metric=tcp_reset/sent", `"node": "acme-db"`}, // the counterpart is there, its fields stripped
		{fmt.Sprintf("%s/alerts/%d", p, ids.childAlert), `"child": "tcp_reset/sent"`},
		{fmt.Sprintf("%s/alerts/%d", p, ids.childAlert), "tcp_reset is CRIT on acme-web: tcp_reset/sent at 12 resets/s"},
		{fmt.Sprintf("%s/reports?definition=%d", p, ids.definition), `"ping p99"`},
	}
	for _, c := range checks {
		if _, _, body := f.do(acme, "GET", c.path, ""); !strings.Contains(body, c.want) {
			t.Errorf("acme: GET %s has no %q: %.600s", c.path, c.want, body)
		}
	}
}

// echoed is what a 404 repeats of what was asked.
var echoed = regexp.MustCompile(`"[^"]*(agent|nosuch|netns|process)[^"]*"|alert [0-9]+|alerts/[0-9]+`)

func queryTime(t time.Time) string { return url.QueryEscape(t.UTC().Format(time.RFC3339)) }

// around is the part of body around marker, for a readable failure.
func around(body, marker string) string {
	i := strings.Index(body, marker)
	return body[max(0, i-300):min(len(body), i+100)]
}
