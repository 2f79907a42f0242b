package catalog

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nbs-project/nbs/internal/schema"
)

func TestMetricSegment(t *testing.T) {
	for in, want := range map[string]string{
		"vA": "va", "eth0": "eth0", "veth1@if2": "veth1_if2", "br-lan.10": "br-lan.10", "": "_", "wlp0s20f3": "wlp0s20f3",
	} {
		got := MetricSegment(in)
		if got != want {
			t.Errorf("MetricSegment(%q) = %q, want %q", in, got, want)
		}
		if err := schema.CheckID("latency/qdisc/" + got); err != nil {
			t.Errorf("latency/qdisc/%s is not a valid metric id: %v", got, err)
		}
	}
}

// Every metric of these branches has a valid id, a defined parent, a
// description, and histograms a quantile and a scale.
func TestLatencyTXAndAgentDefinitions(t *testing.T) {
	all := append(LatencyTree(), LatencyTXTree()...)
	all = append(all, LatencyQdiscTree()...)
	all = append(all, QdiscDevice("va", "vA", 0), QdiscDevice("eth0.ns4026532598", "eth0", 4026532598))
	all = append(all, LatencySizesTree()...)
	all = append(all, SizesDevice("va", "vA", 0)...)
	all = append(all, SizesDevice("eth0.ns4026532598", "eth0", 4026532598)...)
	all = append(all, LatencyFlowsTree()...)
	all = append(all, LatencyRXTree()...)
	all = append(all, ECNTree()...)
	all = append(all, ECNDevicesTree()...)
	all = append(all, ECNDevice("va", "vA", 0), ECNPeer("va", MetricSegment("2001:db8::1"), "2001:db8::1"), ECNPeerOtherChild("va"))
	all = append(all, AgentTree()...)
	all = append(all, AgentProgram(MetricSegment("tcp_send_reset"))...)
	all = append(all, AgentTriggeredSource("latency_qdisc", LatencyQdisc))
	defined := map[string]bool{}
	for _, m := range all {
		defined[m.ID] = true
	}
	for _, m := range all {
		if err := schema.CheckID(m.ID); err != nil {
			t.Errorf("%s: invalid id: %v", m.ID, err)
		}
		if p := m.Parent(); p != "" && !defined[p] {
			t.Errorf("%s: parent %s undefined", m.ID, p)
		}
		if m.Title == "" || m.Unit == "" || len(m.Description) < 40 {
			t.Errorf("%s: title %q, unit %q, description %q", m.ID, m.Title, m.Unit, m.Description)
		}
		// Times are recorded in nanoseconds and shown in ms; sizes in bytes.
		if m.Kind == Histogram && (m.Quantile <= 0 || m.Scale != map[string]float64{"ms": 1e6, "bytes": 1}[m.Unit]) {
			t.Errorf("%s: histogram with quantile %v, scale %v", m.ID, m.Quantile, m.Scale)
		}
	}
}

// Every fixed metric of the catalogue, and every named child worth a note,
// has an id the collector accepts, in its branch, under a defined parent:
// otherwise the collector refuses the agent's hello.
func TestEveryCatalogueIDIsValid(t *testing.T) {
	for _, b := range Documented() {
		defined := map[string]bool{}
		for _, m := range b.Metrics {
			defined[m.ID] = true
		}
		for _, m := range append(b.Metrics, b.Notes...) {
			if err := schema.CheckID(m.ID); err != nil {
				t.Errorf("%s: %v", m.ID, err)
			}
			if r := schema.Root(m.ID); r != b.Root {
				t.Errorf("%s: root %s, in branch %s", m.ID, r, b.Root)
			}
			if p := m.Parent(); p != "" && !defined[p] {
				t.Errorf("%s: parent %s is not among branch %s's fixed metrics", m.ID, p, b.Root)
			}
		}
		if !defined[b.Root] {
			t.Errorf("branch %s does not define its root", b.Root)
		}
	}
}

// TestOwnerChildTitle: a pod's long name still gives a title the collector
// takes (at most 256 bytes of valid UTF-8).
func TestOwnerChildTitle(t *testing.T) {
	label := "pod " + strings.Repeat("é", 200)
	m := OwnerChild(ResetSentReason("no_socket"), "pod:x", label, DefaultTopOwners)
	if len(m.Title) > 256 || !utf8.ValidString(m.Title) || !strings.Contains(m.Description, label) {
		t.Errorf("title %d bytes, valid %v", len(m.Title), utf8.ValidString(m.Title))
	}
}
