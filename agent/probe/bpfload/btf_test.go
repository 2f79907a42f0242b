package bpfload

import (
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// While held, every caller gets the one decoded kernel BTF; released, or
// without a KernelBTF, each gets its own, and loads still work.
func TestKernelBTFSharedUntilReleased(t *testing.T) {
	k := NewKernelBTF()
	first, err := k.Spec()
	if err != nil {
		netlab.SkipOrFail(t, "kernel BTF: %v", err)
	}
	var fn *btf.Func
	if err := first.TypeByName("tcp_sendmsg_locked", &fn); err != nil {
		t.Fatalf("kernel BTF has no tcp_sendmsg_locked: %v", err)
	}
	again, err := k.Spec()
	if err != nil || again != first {
		t.Fatalf("second Spec while held = %p, %v; want the first, %p", again, err, first)
	}
	o := Object{Name: "lltest", BTF: k}
	var objs llObjects
	if err := o.Load(llSpec(t), nil, &objs, nil); err != nil {
		netlab.SkipOrFail(t, "load lltest with shared BTF: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}

	k.Release()
	if c := k.Cache(); c != nil {
		t.Fatalf("Cache after Release = %p, want nil", c)
	}
	own, err := k.Spec()
	if err != nil || own == first {
		t.Fatalf("Spec after Release = %p, %v; want a new one", own, err)
	}
	o = Object{Name: "lltest", BTF: k}
	if err := o.Load(llSpec(t), nil, &objs, nil); err != nil {
		t.Fatalf("load after Release: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}

	var none *KernelBTF
	none.Release()
	if c := none.Cache(); c != nil {
		t.Fatalf("nil KernelBTF has cache %p", c)
	}
	if _, err := none.Spec(); err != nil {
		t.Fatalf("nil KernelBTF Spec: %v", err)
	}
}
