// Package peerload is what the benchmarks' peers (bench/*/peer: programs
// shaped like another project's, measured beside ours in the same run)
// share: attaching their programs, detaching them, and reading per-CPU
// counters. Each peer still loads its own bpf2go object, built as the
// peer builds itself; only the handling around it is here.
package peerload

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Links are a peer's attachments, detached together. A peer embeds it.
type Links struct {
	links []link.Link
}

// Tracing attaches each program to the BTF tracepoint its section names
// (tp_btf/...); on an error, what it attached is detached again.
func (l *Links) Tracing(progs ...*ebpf.Program) error {
	for _, p := range progs {
		k, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return errors.Join(fmt.Errorf("attach the peer: %w", err), l.Detach())
		}
		l.links = append(l.links, k)
	}
	return nil
}

// RawTracepoint attaches prog to the raw tracepoint name.
func (l *Links) RawTracepoint(name string, prog *ebpf.Program) error {
	k, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
	if err != nil {
		return fmt.Errorf("attach the peer: %w", err)
	}
	l.links = append(l.links, k)
	return nil
}

// TCX attaches ingress and egress to the interface ifindex of the calling
// thread's network namespace (TCX); on an error, what it attached is
// detached again.
func (l *Links) TCX(ifindex int, ingress, egress *ebpf.Program) error {
	for _, a := range []struct {
		prog *ebpf.Program
		typ  ebpf.AttachType
	}{{ingress, ebpf.AttachTCXIngress}, {egress, ebpf.AttachTCXEgress}} {
		k, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: a.prog, Attach: a.typ})
		if err != nil {
			return errors.Join(fmt.Errorf("attach the peer: %w", err), l.Detach())
		}
		l.links = append(l.links, k)
	}
	return nil
}

// Detach detaches everything attached; the peer stays loaded.
func (l *Links) Detach() error {
	var errs []error
	for _, k := range l.links {
		errs = append(errs, k.Close())
	}
	l.links = nil
	return errors.Join(errs...)
}

// SumPerCPU reads key of a per-CPU map and sums what field picks of each
// CPU's value.
func SumPerCPU[V any](m *ebpf.Map, key uint32, field func(V) uint64) (uint64, error) {
	var per []V
	if err := m.Lookup(key, &per); err != nil {
		return 0, fmt.Errorf("read the peer's counts: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += field(v)
	}
	return n, nil
}
