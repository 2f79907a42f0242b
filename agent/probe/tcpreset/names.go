package tcpreset

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// Names turns the kernel's numeric reset reasons and socket states into
// stable lower-case names ("no_socket", "established"). The zero value names
// nothing: every code becomes "unknown_<n>".
type Names struct {
	reasons map[uint32]string
	states  map[uint32]string
}

// Reason names an enum sk_rst_reason value, e.g. "no_socket".
func (n Names) Reason(code uint32) string { return lookup(n.reasons, code) }

// State names a TCP socket state, e.g. "established", "syn_sent".
func (n Names) State(code uint32) string { return lookup(n.states, code) }

// ReasonCode is the reverse of Reason, for callers that select by name.
func (n Names) ReasonCode(name string) (uint32, bool) { return reverse(n.reasons, name) }

// StateCode is the reverse of State.
func (n Names) StateCode(name string) (uint32, bool) { return reverse(n.states, name) }

func lookup(m map[uint32]string, code uint32) string {
	if s, ok := m[code]; ok {
		return s
	}
	return fmt.Sprintf("unknown_%d", code)
}

func reverse(m map[uint32]string, name string) (uint32, bool) {
	for c, s := range m {
		if s == name {
			return c, true
		}
	}
	return 0, false
}

// tcpStateTable is used only when the kernel's BTF lacks the anonymous enum
// of TCP_* states. The values are uapi (include/net/tcp_states.h) and have
// only ever been appended to.
func tcpStateTable() map[uint32]string {
	return map[uint32]string{
		1: "established", 2: "syn_sent", 3: "syn_recv", 4: "fin_wait1", 5: "fin_wait2",
		6: "time_wait", 7: "close", 8: "close_wait", 9: "last_ack", 10: "listen",
		11: "closing", 12: "new_syn_recv", 13: "bound_inactive",
	}
}

// LoadNames reads the reset reasons (enum sk_rst_reason) and the TCP states
// from the running kernel's BTF (kernel's when not nil). Reason values
// change between kernel versions, so they are never hard-coded.
func LoadNames(kernel *bpfload.KernelBTF) (Names, error) {
	spec, err := kernel.Spec()
	if err != nil {
		return Names{}, fmt.Errorf("load kernel BTF: %w (needs a kernel built with CONFIG_DEBUG_INFO_BTF, /sys/kernel/btf/vmlinux)", err)
	}
	var reasons *btf.Enum
	if err := spec.TypeByName("sk_rst_reason", &reasons); err != nil {
		return Names{}, fmt.Errorf("find enum sk_rst_reason in kernel BTF: %w (reset reasons need Linux 6.10 or later)", err)
	}
	return Names{
		reasons: enumNames(reasons, "SK_RST_REASON_"),
		states:  tcpStates(spec),
	}, nil
}

// enumNames maps values to names with prefix stripped and lower-cased,
// leaving out sentinels that are counts, not values (SK_RST_REASON_MAX,
// TCP_MAX_STATES).
func enumNames(e *btf.Enum, prefix string) map[uint32]string {
	m := make(map[uint32]string, len(e.Values))
	for _, v := range e.Values {
		name, ok := strings.CutPrefix(v.Name, prefix)
		if !ok || name == "MAX" || strings.HasPrefix(name, "MAX_") || strings.HasSuffix(name, "_MAX") {
			continue
		}
		m[uint32(v.Value)] = strings.ToLower(name)
	}
	return m
}

// tcpStates finds the kernel's anonymous enum { TCP_ESTABLISHED = 1, ... }.
// Anonymous enums cannot be looked up by name, so this walks the types once,
// at load. Falls back to the uapi table.
func tcpStates(spec *btf.Spec) map[uint32]string {
	for typ, err := range spec.All() {
		if err != nil {
			break
		}
		e, ok := typ.(*btf.Enum)
		if ok && e.Name == "" && len(e.Values) > 0 && e.Values[0].Name == "TCP_ESTABLISHED" {
			return enumNames(e, "TCP_")
		}
	}
	return tcpStateTable()
}
