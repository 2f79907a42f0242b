package tcpreset

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/nbs-project/nbs/agent/probe/evidence"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// The mapping rules, on a hand-made enum: prefix stripped, lower case,
// sentinels left out, unknown codes named by number.
func TestEnumNames(t *testing.T) {
	e := &btf.Enum{Name: "sk_rst_reason", Values: []btf.EnumValue{
		{Name: "SK_RST_REASON_NOT_SPECIFIED", Value: 0},
		{Name: "SK_RST_REASON_NO_SOCKET", Value: 1},
		{Name: "SK_RST_REASON_TCP_ABORT_ON_CLOSE", Value: 7},
		{Name: "SK_RST_REASON_MAX", Value: 8},
	}}
	n := Names{reasons: enumNames(e, "SK_RST_REASON_")}
	tests := []struct {
		code uint32
		want string
	}{
		{0, "not_specified"},
		{1, "no_socket"},
		{7, "tcp_abort_on_close"},
		{8, "unknown_8"}, // the _MAX sentinel is not a reason
		{4242, "unknown_4242"},
	}
	for _, tt := range tests {
		if got := n.Reason(tt.code); got != tt.want {
			t.Errorf("Reason(%d) = %q, want %q", tt.code, got, tt.want)
		}
	}
	if got := (Names{}).State(1); got != "unknown_1" {
		t.Errorf("zero Names State(1) = %q, want unknown_1", got)
	}
}

// The running kernel's enums: the reasons the recipes produce exist, and
// every value maps back to its BTF name.
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
	if err := spec.TypeByName("sk_rst_reason", &e); err != nil {
		t.Fatal(err)
	}
	for _, v := range e.Values {
		got := n.Reason(uint32(v.Value))
		if v.Name == "SK_RST_REASON_MAX" {
			if !strings.HasPrefix(got, "unknown_") {
				t.Errorf("sentinel %s named %q", v.Name, got)
			}
			continue
		}
		if want := strings.ToLower(strings.TrimPrefix(v.Name, "SK_RST_REASON_")); got != want {
			t.Errorf("Reason(%d) = %q, want %q (%s)", v.Value, got, want, v.Name)
		}
	}
	for _, name := range []string{"no_socket", "tcp_abort_on_close", "tcp_state", "tcp_abort_on_linger"} {
		if _, ok := n.ReasonCode(name); !ok {
			t.Errorf("kernel has no reset reason %q", name)
		}
	}
	if got := n.Reason(1 << 20); got != "unknown_1048576" {
		t.Errorf("Reason(1<<20) = %q", got)
	}

	// TCP states are uapi: these values are fixed.
	for code, want := range map[uint32]string{1: "established", 2: "syn_sent", 5: "fin_wait2", 7: "close", 8: "close_wait", 12: "new_syn_recv"} {
		if got := n.State(code); got != want {
			t.Errorf("State(%d) = %q, want %q", code, got, want)
		}
	}
	if got := n.State(14); got != "unknown_14" { // TCP_MAX_STATES
		t.Errorf("State(14) = %q, want unknown_14", got)
	}
	// The BTF enum and the fallback table agree where both have a name.
	for code, want := range tcpStateTable() {
		if got := n.State(code); got != want {
			t.Errorf("BTF State(%d) = %q, fallback table says %q", code, got, want)
		}
	}
}

func TestDirectionString(t *testing.T) {
	for d, want := range map[Direction]string{DirectionSent: "sent", DirectionReceived: "received", 0: "direction_0"} {
		if got := d.String(); got != want {
			t.Errorf("Direction(%d).String() = %q, want %q", d, got, want)
		}
	}
}

// The generated event layout decodes as the kernel writes it.
func TestDecodeEvent(t *testing.T) {
	p := &Probe{names: Names{reasons: map[uint32]string{1: "no_socket"}, states: tcpStateTable()}, clock: evidence.ClockWithOffset(time.Second)}
	raw := make([]byte, 56)
	le := func(off int, v uint64, size int) {
		for i := 0; i < size; i++ {
			raw[off+i] = byte(v >> (8 * i))
		}
	}
	le(0, 5_000_000_000, 8) // ts
	le(8, 4026531840, 4)    // netns
	le(12, 1, 4)            // reason
	raw[16] = 1             // sent
	raw[17] = 0             // no socket
	le(18, 2, 2)            // AF_INET
	le(20, 9, 2)            // sport
	le(22, 40000, 2)        // dport
	copy(raw[24:], []byte{198, 18, 0, 2})
	copy(raw[40:], []byte{198, 18, 0, 1})
	ev, err := p.decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Time.UnixNano() != 6_000_000_000 || ev.Netns != 4026531840 || ev.Direction != DirectionSent ||
		ev.Reason != "no_socket" || ev.State != "" ||
		ev.Src.String() != "198.18.0.2:9" || ev.Dst.String() != "198.18.0.1:40000" {
		t.Errorf("decoded %+v", ev)
	}
	if _, err := p.decode(raw[:20]); err == nil {
		t.Error("short record decoded without error")
	}
}
