package bpfload

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Point is where one program attaches.
type Point struct {
	// Name is the attach point as errors and run-time statistics name it:
	// the tracepoint ("tcp_send_reset").
	Name    string
	Program *ebpf.Program
	// where says what Name attaches to in errors, when Name alone does not.
	where  string
	attach func(*ebpf.Program) (link.Link, error)
}

// Tracepoint attaches a tp_btf program to the BTF tracepoint name.
func Tracepoint(name string, prog *ebpf.Program) Point {
	return Point{Name: name, Program: prog, attach: func(p *ebpf.Program) (link.Link, error) {
		return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
	}}
}

// Cgroup attaches a cgroup program (such as sockops) to the cgroup v2
// directory path.
func Cgroup(name, path string, typ ebpf.AttachType, prog *ebpf.Program) Point {
	return Point{Name: name, Program: prog, where: " to cgroup " + path, attach: func(p *ebpf.Program) (link.Link, error) {
		return link.AttachCgroup(link.CgroupOptions{Path: path, Attach: typ, Program: p})
	}}
}

// Attach attaches the programs at Points, in order, so a program that must
// run before another is listed first. If one fails, Attach detaches those
// it attached and returns the error: the Object is as before, still loaded.
// Attaching an attached Object does nothing.
func (o *Object) Attach() error {
	if o.Attached() {
		return nil
	}
	for _, pt := range o.Points {
		if pt.attach == nil {
			return fmt.Errorf("attach %s: no attach point (make Points with Tracepoint or Cgroup)", pt.Name)
		}
	}
	if o.PinDir != "" && o.pinLinks {
		return o.attachPinned()
	}
	for _, pt := range o.Points {
		l, err := pt.attach(pt.Program)
		if err != nil {
			return errors.Join(fmt.Errorf("attach %s%s: %w (%s)", pt.Name, pt.where, err, o.Hint(err)), o.Detach())
		}
		o.links = append(o.links, l)
		o.attached = append(o.attached, pt.Name)
	}
	return nil
}

// Detach detaches every attached program; they stay loaded, and maps keep
// what they counted.
func (o *Object) Detach() error {
	var errs []error
	for i, l := range o.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", o.attached[i], err))
		}
	}
	o.links, o.attached = nil, nil
	return errors.Join(errs...)
}

// unpinLinks unpins the links attached so far, when a later one failed:
// a probe the agent cannot run must not go on running without it.
func (o *Object) unpinLinks() error {
	if !o.pinLinks {
		return nil
	}
	var errs []error
	for _, l := range o.links {
		if err := l.Unpin(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Attached says whether the programs are attached.
func (o *Object) Attached() bool { return len(o.links) > 0 }

// Programs returns the programs by attach point, attached or not, for
// run-time statistics (the agent branch measures what each costs).
func (o *Object) Programs() map[string]*ebpf.Program {
	m := make(map[string]*ebpf.Program, len(o.Points))
	for _, pt := range o.Points {
		m[pt.Name] = pt.Program
		if p := o.adopted[pt.Name]; p != nil {
			m[pt.Name] = p // the one attached: its statistics are the cost
		}
	}
	return m
}
