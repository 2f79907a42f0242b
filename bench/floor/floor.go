// Package floor is the floor of every hook an always-on program of the
// agent uses (bpf/test/floor.bpf.c): an empty program at the same
// tracepoint, which the BPF benchmarks attach and sample beside the
// agent's program and its peer in the same run. An empty program's ns/run
// is what the trampoline and the run-time statistics cost at that hook:
// the least any program there can cost.
package floor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Floor is the empty programs, loaded; Attach attaches the ones wanted.
type Floor struct {
	coll  *ebpf.Collection
	links []link.Link
}

// Load loads every floor program without attaching it.
func Load() (*Floor, error) {
	spec, err := loadFloor()
	if err != nil {
		return nil, fmt.Errorf("parse the floor object: %w", err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load the floor programs: %w", err)
	}
	return &Floor{coll: coll}, nil
}

// Program returns the empty program at tracepoint hook ("kfree_skb").
func (f *Floor) Program(hook string) (*ebpf.Program, error) {
	p := f.coll.Programs["floor_"+hook]
	if p == nil {
		return nil, fmt.Errorf("no floor program for %q", hook)
	}
	return p, nil
}

// Attach attaches the empty programs at hooks and returns them by hook.
// Programs at one tracepoint run in the order they were attached: attach
// the floor where the comparison needs it (the benchmarks say which).
func (f *Floor) Attach(hooks ...string) (map[string]*ebpf.Program, error) {
	out := make(map[string]*ebpf.Program, len(hooks))
	for _, h := range hooks {
		p, err := f.Program(h)
		if err != nil {
			return nil, err
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return nil, fmt.Errorf("attach the floor at %s: %w", h, err)
		}
		f.links = append(f.links, l)
		out[h] = p
	}
	return out, nil
}

// Hooks lists the tracepoints the floor has a program for.
func (f *Floor) Hooks() []string {
	var out []string
	for name := range f.coll.Programs {
		out = append(out, strings.TrimPrefix(name, "floor_"))
	}
	return out
}

// Close detaches and frees the floor.
func (f *Floor) Close() error {
	var errs []error
	for _, l := range f.links {
		errs = append(errs, l.Close())
	}
	f.coll.Close()
	return errors.Join(errs...)
}
