package drops

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// Names turns the kernel's numeric drop reasons into stable lower-case names
// ("netfilter_drop", "no_socket"), read from the running kernel's BTF:
// reason values differ between kernel versions (tools that hard-code them
// mislabel most drops on newer kernels). The zero value names nothing: every
// code becomes "unknown_<n>".
type Names struct {
	reasons map[uint32]string
	// max is SKB_DROP_REASON_MAX, the number of core reasons; 0 if unknown.
	max uint32
}

// Reason names an enum skb_drop_reason value. Core reasons lose their
// SKB_DROP_REASON_ prefix; a subsystem reason (subsystem id in the high 16
// bits, e.g. openvswitch's) that BTF does not name becomes
// "subsys_<id>_<code>".
func (n Names) Reason(code uint32) string {
	if s, ok := n.reasons[code]; ok {
		return s
	}
	if sub := code >> 16; sub != 0 {
		return fmt.Sprintf("subsys_%d_%d", sub, code&0xffff)
	}
	return fmt.Sprintf("unknown_%d", code)
}

// ReasonCode is the reverse of Reason.
func (n Names) ReasonCode(name string) (uint32, bool) {
	for c, s := range n.reasons {
		if s == name {
			return c, true
		}
	}
	return 0, false
}

// Max is the kernel's SKB_DROP_REASON_MAX (the count of core reasons), or 0
// if its BTF does not say.
func (n Names) Max() uint32 { return n.max }

// LoadNames reads enum skb_drop_reason, and the reason enums of subsystems
// that register their own (mac80211, openvswitch: enums named
// *_drop_reason whose values carry a subsystem id), from kernel BTF
// (kernel's when not nil).
func LoadNames(kernel *bpfload.KernelBTF) (Names, error) {
	spec, err := kernel.Spec()
	if err != nil {
		return Names{}, fmt.Errorf("load kernel BTF: %w (needs a kernel built with CONFIG_DEBUG_INFO_BTF, /sys/kernel/btf/vmlinux)", err)
	}
	var core *btf.Enum
	if err := spec.TypeByName("skb_drop_reason", &core); err != nil {
		return Names{}, fmt.Errorf("find enum skb_drop_reason in kernel BTF: %w (drop reasons need Linux 5.17 or later)", err)
	}
	n := namesFromEnum(core)
	for _, sub := range []string{"mac80211_drop_reason", "ovs_drop_reason"} {
		var e *btf.Enum
		if spec.TypeByName(sub, &e) == nil {
			n.addSubsystem(e)
		}
	}
	return n, nil
}

// namesFromEnum maps enum skb_drop_reason: SKB_DROP_REASON_X becomes "x";
// the two values without that prefix (SKB_NOT_DROPPED_YET, SKB_CONSUMED)
// lose "SKB_"; the sentinels (_MAX, the subsystem mask) are not reasons.
func namesFromEnum(e *btf.Enum) Names {
	n := Names{reasons: make(map[uint32]string, len(e.Values))}
	for _, v := range e.Values {
		name, ok := strings.CutPrefix(v.Name, "SKB_DROP_REASON_")
		if !ok {
			name, ok = strings.CutPrefix(v.Name, "SKB_")
		}
		switch {
		case !ok:
			continue
		case name == "MAX":
			n.max = uint32(v.Value)
			continue
		case strings.HasPrefix(name, "SUBSYS_"):
			continue
		}
		n.reasons[uint32(v.Value)] = strings.ToLower(name)
	}
	return n
}

// addSubsystem adds a subsystem's reasons (values above 0xffff), stripping
// the common prefix of the enum's names (e.g. "OVS_DROP_").
func (n *Names) addSubsystem(e *btf.Enum) {
	prefix := commonPrefix(e)
	for _, v := range e.Values {
		if v.Value>>16 == 0 || strings.HasSuffix(v.Name, "_MAX") {
			continue
		}
		name := strings.ToLower(strings.TrimPrefix(v.Name, prefix))
		n.reasons[uint32(v.Value)] = strings.ToLower(strings.TrimSuffix(e.Name, "_drop_reason")) + "_" + name
	}
}

func commonPrefix(e *btf.Enum) string {
	if len(e.Values) == 0 {
		return ""
	}
	p := e.Values[0].Name
	for _, v := range e.Values[1:] {
		for !strings.HasPrefix(v.Name, p) {
			p = p[:len(p)-1]
		}
	}
	// Cut at a word boundary so "OVS_DROP_LAST_ACTION", "OVS_DROP_LAST_..."
	// keep "LAST_".
	if i := strings.LastIndexByte(p, '_'); i >= 0 {
		return p[:i+1]
	}
	return ""
}
