package bpfload

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfhist/lltest"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// llObjects takes from the lltest object (a syscall program and three
// global arrays) what the tests need.
type llObjects struct {
	Test *ebpf.Program  `ebpf:"nbs_ll_test"`
	In   *ebpf.Variable `ebpf:"ll_in"`
}

func (o *llObjects) Close() error { return o.Test.Close() }

func llSpec(t *testing.T) *ebpf.CollectionSpec {
	t.Helper()
	spec, err := lltest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// A variable the object does not have is an error naming it (every one
// missing, in order), and nothing is loaded.
func TestLoadMissingVariable(t *testing.T) {
	o := Object{Name: "lltest"}
	var objs llObjects
	err := o.Load(llSpec(t), Vars{"target_netns": uint32(1), "ll_in": [lltest.Batch]uint64{}, "evidence_per_sec": uint32(2)}, &objs, nil)
	want := "set evidence_per_sec: not in the lltest object\nset target_netns: not in the lltest object"
	if err == nil || err.Error() != want {
		t.Fatalf("Load error %q, want %q", err, want)
	}
	if objs.Test != nil || len(o.loaded) != 0 {
		t.Fatalf("Load loaded %v after a variable error", objs.Test)
	}
}

// A value of the wrong size is an error naming the variable.
func TestLoadWrongVariableSize(t *testing.T) {
	o := Object{Name: "lltest"}
	var objs llObjects
	err := o.Load(llSpec(t), Vars{"ll_in": uint32(1)}, &objs, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "set ll_in: ") {
		t.Fatalf("Load error %v, want one about ll_in", err)
	}
}

// The variables are set before the programs load, so the kernel's copy
// holds them.
func TestLoadSetsVariables(t *testing.T) {
	o := Object{Name: "lltest"}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Error(err)
		}
	})
	var in [lltest.Batch]uint64
	for i := range in {
		in[i] = uint64(i) * 1000
	}
	var objs llObjects
	if err := o.Load(llSpec(t), Vars{"ll_in": in}, &objs, nil); err != nil {
		netlab.SkipOrFail(t, "bpfload: %v", err)
	}
	var got [lltest.Batch]uint64
	if err := objs.In.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got != in {
		t.Fatalf("ll_in in the kernel starts %v, want %v", got[:4], in[:4])
	}
}

// counter is a tp_btf program on sys_enter that counts its runs in a
// per-CPU array: the test's oracle of whether it is attached.
type counter struct {
	Count  *ebpf.Program `ebpf:"count"`
	Counts *ebpf.Map     `ebpf:"counts"`
}

func (c *counter) Close() error { return errors.Join(c.Count.Close(), c.Counts.Close()) }

func counterSpec(body asm.Instructions) *ebpf.CollectionSpec {
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"counts": {Name: "counts", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"count": {Name: "count", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sys_enter",
				License: "GPL", Instructions: body},
		},
	}
}

var countRuns = asm.Instructions{
	asm.StoreImm(asm.RFP, -4, 0, asm.Word),
	asm.Mov.Reg(asm.R2, asm.RFP),
	asm.Add.Imm(asm.R2, -4),
	asm.LoadMapPtr(asm.R1, 0).WithReference("counts"),
	asm.FnMapLookupElem.Call(),
	asm.JEq.Imm(asm.R0, 0, "out"),
	asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
	asm.Add.Imm(asm.R1, 1),
	asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
	asm.Return(),
}

func loadCounter(t *testing.T) (*Object, *counter) {
	t.Helper()
	o := &Object{Name: "counter", Needs: "a kernel with BTF tracepoint sys_enter"}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Error(err)
		}
	})
	var c counter
	if err := o.Load(counterSpec(countRuns), nil, &c, nil); err != nil {
		netlab.SkipOrFail(t, "bpfload: %v", err)
	}
	return o, &c
}

// runs returns how often the counter ran between two reads with
// syscalls in between; runs that were under way while it was detached
// have ended before the first read.
func runs(t *testing.T, c *counter) uint64 {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	before, err := LookupSum[uint64](c.Counts, uint32(0))
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		syscall.Getppid()
	}
	after, err := LookupSum[uint64](c.Counts, uint32(0))
	if err != nil {
		t.Fatal(err)
	}
	return after - before
}

// Attach, Detach and Close: what is attached runs, what is detached does
// not, and Close frees the programs.
func TestAttachDetachClose(t *testing.T) {
	o, c := loadCounter(t)
	o.Points = []Point{Tracepoint("sys_enter", c.Count)}
	if got := o.Programs(); len(got) != 1 || got["sys_enter"] != c.Count {
		t.Fatalf("Programs() = %v", got)
	}
	if n := runs(t, c); n != 0 {
		t.Fatalf("ran %d times before Attach", n)
	}
	if err := o.Attach(); err != nil {
		t.Fatal(err)
	}
	if !o.Attached() {
		t.Fatal("not Attached after Attach")
	}
	if err := o.Attach(); err != nil || len(o.links) != 1 {
		t.Fatalf("second Attach: %v, %d links", err, len(o.links))
	}
	if n := runs(t, c); n < 100 {
		t.Fatalf("attached, ran %d times over 100 syscalls", n)
	}
	if err := o.Detach(); err != nil {
		t.Fatal(err)
	}
	if o.Attached() {
		t.Fatal("Attached after Detach")
	}
	if n := runs(t, c); n != 0 {
		t.Fatalf("ran %d times after Detach", n)
	}
	if err := o.Attach(); err != nil {
		t.Fatalf("Attach after Detach: %v", err)
	}
	if n := runs(t, c); n < 100 {
		t.Fatalf("attached again, ran %d times over 100 syscalls", n)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if o.Attached() || c.Count.FD() >= 0 || c.Counts.FD() >= 0 {
		t.Fatalf("after Close: attached %v, program fd %d, map fd %d", o.Attached(), c.Count.FD(), c.Counts.FD())
	}
	if err := o.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// When a later point fails, Attach detaches the ones before it: the
// program that did attach no longer runs, and it stays loaded to retry.
func TestAttachPartialFailure(t *testing.T) {
	o, c := loadCounter(t)
	missing := "/sys/fs/cgroup/nbs-no-such-cgroup-" + fmt.Sprint(os.Getpid())
	o.Points = []Point{
		Tracepoint("sys_enter", c.Count),
		Cgroup("sockops", missing, ebpf.AttachCGroupSockOps, c.Count),
	}
	err := o.Attach()
	want := "attach sockops to cgroup " + missing + ": "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "(needs CAP_BPF/root and a kernel with BTF tracepoint sys_enter)") {
		t.Fatalf("Attach error %v, want %q... with the Needs hint", err, want)
	}
	if o.Attached() {
		t.Fatal("Attached after a failed Attach")
	}
	if n := runs(t, c); n != 0 {
		t.Fatalf("the program attached before the failure ran %d times", n)
	}
	if c.Count.FD() < 0 {
		t.Fatal("a failed Attach freed the program")
	}
}

// A program the verifier refuses is a load error with the hint, and an
// Object that had loaded before is freed: half an object is of no use.
func TestLoadFailureFreesEarlierLoads(t *testing.T) {
	o, c := loadCounter(t)
	var bad counter
	err := o.Load(counterSpec(asm.Instructions{asm.Return()}), nil, &bad, nil) // R0 never set
	var ve *ebpf.VerifierError
	if err == nil || !errors.As(err, &ve) || !strings.HasPrefix(err.Error(), "load counter programs: ") ||
		!strings.HasSuffix(err.Error(), "(needs CAP_BPF/root and a kernel with BTF tracepoint sys_enter)") {
		t.Fatalf("Load error %v, want a verifier error with the hint", err)
	}
	if c.Count.FD() >= 0 || c.Counts.FD() >= 0 || len(o.loaded) != 0 {
		t.Fatalf("after the failed Load: program fd %d, map fd %d, %d loaded", c.Count.FD(), c.Counts.FD(), len(o.loaded))
	}
}

func TestHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Object
		err  error
		want string
	}{
		{"EPERM", Object{Needs: "a kernel"}, fmt.Errorf("load program: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", unix.EPERM),
			"needs CAP_BPF and CAP_PERFMON, or root (not RLIMIT_MEMLOCK: kernels since 5.11 charge BPF memory to the cgroup)"},
		{"EACCES with caps", Object{Caps: "CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON"}, unix.EACCES,
			"needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, or root (not RLIMIT_MEMLOCK: kernels since 5.11 charge BPF memory to the cgroup)"},
		{"verifier", Object{Needs: "a kernel (6.7+ for tcp_sock.total_rto)"},
			fmt.Errorf("load program: %w", &ebpf.VerifierError{Cause: unix.EACCES, Log: []string{"invalid access to field total_rto"}}),
			"needs CAP_BPF/root and a kernel (6.7+ for tcp_sock.total_rto)"},
		{"other", Object{Needs: "a kernel (6.10+) with BTF tracepoint tcp_send_reset"}, unix.EINVAL,
			"needs CAP_BPF/root and a kernel (6.10+) with BTF tracepoint tcp_send_reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.Hint(tc.err); got != tc.want {
				t.Fatalf("Hint = %q, want %q", got, tc.want)
			}
		})
	}
}

// Unpin removes only from bpffs: a directory elsewhere is refused and left
// as it is, and one that is not there is no error.
func TestUnpinOnlyInBPFFS(t *testing.T) {
	plain := t.TempDir()
	if err := os.WriteFile(plain+"/keep", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Unpin(plain); err == nil || !strings.Contains(err.Error(), "not a bpffs directory") {
		t.Errorf("Unpin of a plain directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(plain + "/keep"); err != nil {
		t.Errorf("Unpin removed a file outside bpffs: %v", err)
	}
	if err := Unpin(plain + "/absent"); err != nil {
		t.Errorf("Unpin of a missing directory: %v", err)
	}
	fs := netlab.BPFFS(t)
	if err := os.MkdirAll(fs+"/nbs/node/tcp_reset", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Unpin(fs + "/nbs/node"); err != nil {
		t.Errorf("Unpin in bpffs: %v", err)
	}
	if _, err := os.Stat(fs + "/nbs/node"); !os.IsNotExist(err) {
		t.Errorf("the pin directory is still there: %v", err)
	}
}
