// Package bpfload puts a probe's BPF object into the kernel and takes it out
// again: it sets the object's global variables, loads it (logging the
// verifier's reasons when the kernel refuses), attaches its programs, frees
// everything when a step fails half-way, and sums the per-CPU counters the
// programs keep. Every probe under agent/probe loads this way, so their load
// errors read alike and carry the hint that is right on this project's
// kernels (docs/kernel.md, "Attach points").
//
// Loading the real programs is also how a probe finds out whether the kernel
// can run it: cilium/ebpf's feature probes test tracing programs with
// fentry, which these kernels refuse although tp_btf works.
package bpfload

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// DefaultCaps are the capabilities that load and attach tracing programs.
const DefaultCaps = "CAP_BPF and CAP_PERFMON"

// Vars are values for an object's global variables (the bpf2go constants
// <object>Var<Name> name them), set before it is loaded.
type Vars map[string]any

// Object is one probe's BPF object in the kernel: what Load loaded and what
// Attach attached. Set Name, Needs and Log (and Caps if the programs need
// more than DefaultCaps) before Load, and Points after it.
//
// An Object is not safe for concurrent use: a probe calls it under its own
// lock.
type Object struct {
	// Name names the object in errors and logs: "tcp_reset".
	Name string
	// Caps are the capabilities that can stand in for root; DefaultCaps
	// when empty.
	Caps string
	// Needs is what the kernel must offer, for load and attach errors other
	// than a refused permission: "a kernel (6.10+) with BTF tracepoint
	// tcp_send_reset(sk, skb, reason)".
	Needs string
	// Log gets the verifier's log when the kernel refuses a program; nil
	// discards it.
	Log *slog.Logger
	// BTF is the kernel BTF Load shares with other loads; nil reads it
	// for each load.
	BTF *KernelBTF
	// Points are where Attach attaches the programs, in order; Programs
	// reports them. They name loaded programs, so they are set after Load.
	Points []Point
	// PinDir, when set, is the object's own directory in bpffs where its
	// maps, and the links of an always-on probe (Guarded.AttachOrClose),
	// are pinned so they outlive the agent (pin.go); empty pins nothing.
	PinDir string

	loaded   []io.Closer // in load order
	links    []link.Link // links[i] attaches the point named attached[i]
	attached []string

	// pinLinks pins the links too (an always-on probe); pins* count the
	// pinned maps Load found absent, adopted or replaced; adopted are the
	// programs of adopted links, by point.
	pinLinks                           bool
	pinsNew, pinsAdopted, pinsReplaced int
	adopted                            map[string]*ebpf.Program
	oldMaps                            []oldMap // see carryOver
}

// Load sets vars in spec and loads spec into objs, a bpf2go objects struct
// (or one like it: LoadAndAssign fills it, Close frees it), which Close will
// free. A probe whose programs load apart (to run partly on older kernels)
// calls Load again with nil vars, and opts.MapReplacements to share maps.
// Unless opts has a cache of its own, the load uses BTF's.
//
// A variable spec does not have is an error naming it, rather than a
// program silently running with its default. When Load fails it frees what
// earlier calls loaded: a half-loaded object is of no use.
func (o *Object) Load(spec *ebpf.CollectionSpec, vars Vars, objs io.Closer, opts *ebpf.CollectionOptions) error {
	if err := o.set(spec, vars); err != nil {
		return errors.Join(err, o.Close())
	}
	if c := o.BTF.Cache(); c != nil && (opts == nil || opts.Cache == nil) {
		var withCache ebpf.CollectionOptions
		if opts != nil {
			withCache = *opts
		}
		withCache.Cache = c
		opts = &withCache
	}
	// Pinning is a bonus: where it fails the probe runs as without it.
	err := errors.New("not loaded")
	if o.PinDir != "" {
		pinned, perr := o.preparePins(spec, opts)
		if perr == nil {
			err = spec.LoadAndAssign(objs, pinned)
		}
		if perr != nil || (err != nil && !isVerifierError(err)) {
			o.log().Warn(o.Name+": cannot pin; running without, so an agent restart loses what it counts meanwhile",
				"dir", o.PinDir, "err", errors.Join(perr, err))
			o.PinDir = ""
			for _, ms := range spec.Maps {
				ms.Pinning = ebpf.PinNone
			}
		}
	}
	if o.PinDir == "" {
		err = spec.LoadAndAssign(objs, opts)
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			o.log().Debug(o.Name+" verifier log", "log", fmt.Sprintf("%+v", ve))
		}
		return errors.Join(fmt.Errorf("load %s programs: %w (%s)", o.Name, err, o.Hint(err)), o.Close())
	}
	o.loaded = append(o.loaded, objs)
	return nil
}

func isVerifierError(err error) bool {
	var ve *ebpf.VerifierError
	return errors.As(err, &ve)
}

// set sets every variable, reporting every one it could not set.
func (o *Object) set(spec *ebpf.CollectionSpec, vars Vars) error {
	var errs []error
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	slices.Sort(names) // the same error every time
	for _, name := range names {
		v, ok := spec.Variables[name]
		if !ok {
			errs = append(errs, fmt.Errorf("set %s: not in the %s object", name, o.Name))
			continue
		}
		if err := v.Set(vars[name]); err != nil {
			errs = append(errs, fmt.Errorf("set %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Hint says in operator terms what a load or attach error usually means.
// A refused permission is a missing capability: cilium/ebpf blames
// RLIMIT_MEMLOCK for EPERM, which is wrong on the kernels this project needs
// (since 5.11 BPF memory is charged to the cgroup). The verifier refuses with
// EACCES too, but that means the kernel lacks what a program uses.
func (o *Object) Hint(err error) string {
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) {
		caps := o.Caps
		if caps == "" {
			caps = DefaultCaps
		}
		return "needs " + caps + ", or root (not RLIMIT_MEMLOCK: kernels since 5.11 charge BPF memory to the cgroup)"
	}
	return "needs CAP_BPF/root and " + o.Needs
}

// Close detaches what is attached and frees what was loaded, newest first.
// Closing a closed Object does nothing.
func (o *Object) Close() error {
	errs := []error{o.Detach()}
	for _, c := range slices.Backward(o.loaded) {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s objects: %w", o.Name, err))
		}
	}
	o.loaded = nil
	for _, om := range o.oldMaps {
		om.m.Close()
	}
	o.oldMaps = nil
	for _, p := range o.adopted {
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s adopted program: %w", o.Name, err))
		}
	}
	o.adopted = nil
	return errors.Join(errs...)
}

func (o *Object) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}
