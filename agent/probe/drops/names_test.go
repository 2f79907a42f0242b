package drops

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// The mapping rules on a hand-made enum.
func TestNamesFromEnum(t *testing.T) {
	e := &btf.Enum{Name: "skb_drop_reason", Values: []btf.EnumValue{
		{Name: "SKB_NOT_DROPPED_YET", Value: 0},
		{Name: "SKB_CONSUMED", Value: 1},
		{Name: "SKB_DROP_REASON_NOT_SPECIFIED", Value: 2},
		{Name: "SKB_DROP_REASON_NETFILTER_DROP", Value: 7},
		{Name: "SKB_DROP_REASON_MAX", Value: 8},
		{Name: "SKB_DROP_REASON_SUBSYS_MASK", Value: 0xffff0000},
	}}
	n := namesFromEnum(e)
	n.addSubsystem(&btf.Enum{Name: "ovs_drop_reason", Values: []btf.EnumValue{
		{Name: "OVS_DROP_LAST_ACTION", Value: 2<<16 | 1},
		{Name: "OVS_DROP_ACTION_ERROR", Value: 2<<16 | 2},
		{Name: "OVS_DROP_MAX", Value: 2<<16 | 3},
	}})
	for code, want := range map[uint32]string{
		0: "not_dropped_yet", 1: "consumed", 2: "not_specified", 7: "netfilter_drop",
		8: "unknown_8", 0xffff0000: "subsys_65535_0",
		2<<16 | 1: "ovs_last_action", 2<<16 | 2: "ovs_action_error", 2<<16 | 3: "subsys_2_3",
		5<<16 | 9: "subsys_5_9",
	} {
		if got := n.Reason(code); got != want {
			t.Errorf("Reason(%#x) = %q, want %q", code, got, want)
		}
	}
	if n.Max() != 8 {
		t.Errorf("Max() = %d, want 8", n.Max())
	}
	if c, ok := n.ReasonCode("netfilter_drop"); !ok || c != 7 {
		t.Errorf("ReasonCode(netfilter_drop) = %d, %v", c, ok)
	}
	if got := (Names{}).Reason(3); got != "unknown_3" {
		t.Errorf("zero Names: %q", got)
	}
}

// Every reason of the running kernel maps to its BTF name, whatever its
// number: in particular NETFILTER_DROP, which tools with hard-coded tables
// mislabel on newer kernels.
func TestLoadNamesFromKernel(t *testing.T) {
	n, err := LoadNames(nil)
	if err != nil {
		netlab.SkipOrFail(t, "kernel BTF: %v", err)
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	var e *btf.Enum
	if err := spec.TypeByName("skb_drop_reason", &e); err != nil {
		t.Fatal(err)
	}
	var nf uint64
	found := false
	for _, v := range e.Values {
		if v.Name == "SKB_DROP_REASON_NETFILTER_DROP" {
			nf, found = v.Value, true
		}
		if v.Name == "SKB_DROP_REASON_MAX" || strings.HasPrefix(v.Name, "SKB_DROP_REASON_SUBSYS_") {
			continue
		}
		want, ok := strings.CutPrefix(v.Name, "SKB_DROP_REASON_")
		if !ok {
			want = strings.TrimPrefix(v.Name, "SKB_")
		}
		want = strings.ToLower(want)
		if got := n.Reason(uint32(v.Value)); got != want {
			t.Errorf("Reason(%d) = %q, want %q (%s)", v.Value, got, want, v.Name)
		}
	}
	if !found {
		t.Fatal("kernel BTF has no SKB_DROP_REASON_NETFILTER_DROP")
	}
	if got := n.Reason(uint32(nf)); got != "netfilter_drop" {
		t.Errorf("Reason(%d) = %q, want netfilter_drop", nf, got)
	}
	if c, ok := n.ReasonCode("netfilter_drop"); !ok || uint64(c) != nf {
		t.Errorf("ReasonCode(netfilter_drop) = %d, %v; BTF says %d", c, ok, nf)
	}
	if n.Max() == 0 || n.Max() >= Overflow {
		t.Errorf("SKB_DROP_REASON_MAX = %d: want 0 < max < %d (the probe's slots)", n.Max(), Overflow)
	}
	t.Logf("%d drop reasons; NETFILTER_DROP = %d", n.Max(), nf)
}
