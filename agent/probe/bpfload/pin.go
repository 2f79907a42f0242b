package bpfload

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Pinning keeps an always-on probe counting while no agent runs: its maps
// and the links of its programs are pinned in a bpffs directory
// (Object.PinDir), so a killed or restarting agent leaves them in the
// kernel, and the next agent adopts them. The counter maps then carry
// every count made since the first agent created them, and the agent's
// ledger reports what the previous agent had not reported yet.
//
// What is pinned: every map of the object but its global variables
// (.rodata, .data, .bss: a new agent's configuration must win), including
// the evidence ring, whose unread events the next agent then reads; and,
// once attached, each program's link, "link_<point>".
//
// A pinned map whose layout differs from this agent's (an upgrade changed
// its type, key, value or size) cannot be adopted: it is replaced by a
// fresh one, and the object does not continue its counts (Continued).
// A pinned link is adopted when its program is this agent's (same
// instructions, same configuration, same maps); otherwise it is replaced:
// the old program is detached before the new one attaches, so nothing is
// counted twice, and what happens in between is not counted.

// pinnable says whether a map of the object is pinned: not the sections of
// global variables, which hold configuration and a program's private state.
func pinnable(name string) bool { return !strings.HasPrefix(name, ".") }

// preparePins makes the object's pin directory, marks its maps for pinning
// and takes out pinned maps this agent cannot adopt. It returns the options
// the load uses.
func (o *Object) preparePins(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) (*ebpf.CollectionOptions, error) {
	if err := os.MkdirAll(o.PinDir, 0o700); err != nil {
		return nil, fmt.Errorf("pin %s: make %s: %w (needs bpffs mounted at /sys/fs/bpf, or --bpf.pin-dir=none)", o.Name, o.PinDir, err)
	}
	var pinned ebpf.CollectionOptions
	if opts != nil {
		pinned = *opts
	}
	pinned.Maps.PinPath = o.PinDir
	for name, ms := range spec.Maps {
		if !pinnable(name) || pinned.MapReplacements[name] != nil {
			continue
		}
		ms.Pinning = ebpf.PinByName
		path := filepath.Join(o.PinDir, ms.Name)
		old, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, fs.ErrNotExist) {
			o.pinsNew++
			continue
		}
		if err == nil {
			err = ms.Compatible(old)
			old.Close()
			if err == nil {
				o.pinsAdopted++
				continue
			}
		}
		// An upgrade changed the layout (or the pin is not a map): its
		// counts cannot be read with this agent's types, so they are
		// replaced, and the agent says so rather than report a jump.
		o.log().Warn(o.Name+": pinned map cannot be adopted; replacing it, so counts made since the previous agent's last report are lost",
			"map", path, "err", err)
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("pin %s: replace %s: %w", o.Name, path, err)
		}
		o.pinsReplaced++
	}
	return &pinned, nil
}

// Continued says whether the object's counter maps were adopted from a
// previous agent, every one of them, so its counts continue that agent's:
// the agent then reports what was counted since that agent's last report.
func (o *Object) Continued() bool {
	return o.PinDir != "" && o.pinsAdopted > 0 && o.pinsReplaced == 0
}

// attachPinned attaches pt, adopting the link pinned for it when that runs
// this agent's program, and pins the link otherwise.
func (o *Object) attachPinned(pt Point) (link.Link, error) {
	path := filepath.Join(o.PinDir, "link_"+pt.Name)
	old, err := link.LoadPinnedLink(path, nil)
	switch {
	case err == nil:
		prog, same, why := sameProgram(old, pt.Program)
		if same {
			o.adopted[pt.Name] = prog
			o.log().Info(o.Name+": adopted the pinned program of the previous agent", "point", pt.Name)
			return old, nil
		}
		if prog != nil {
			prog.Close()
		}
		// Detach the old program first: both attached would count each
		// event twice in the shared maps.
		o.log().Warn(o.Name+": replacing the pinned program of the previous agent; events in the moment between are not counted",
			"point", pt.Name, "why", why)
		if err := errors.Join(old.Unpin(), old.Close()); err != nil {
			return nil, fmt.Errorf("replace pinned link %s: %w", path, err)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		o.log().Warn(o.Name+": removing a pin that is not a usable link", "path", path, "err", err)
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove %s: %w", path, err)
		}
	}
	l, err := pt.attach(pt.Program)
	if err != nil {
		return nil, err
	}
	if err := l.Pin(path); err != nil {
		// Attached all the same: it counts while this agent runs.
		o.log().Warn(o.Name+": cannot pin the link; the program stops with this agent", "path", path, "err", err)
	}
	return l, nil
}

// sameProgram says whether the program the link runs is prog as this agent
// loaded it: the same instructions (the kernel's tag), using the same maps
// but for their private globals, with the same configuration (.rodata).
// When it is, the returned program is the link's, for its statistics.
func sameProgram(l link.Link, prog *ebpf.Program) (*ebpf.Program, bool, string) {
	info, err := l.Info()
	if err != nil {
		return nil, false, "link info: " + err.Error()
	}
	old, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return nil, false, "open the link's program: " + err.Error()
	}
	oi, err1 := old.Info()
	ni, err2 := prog.Info()
	if err := errors.Join(err1, err2); err != nil {
		return old, false, "program info: " + err.Error()
	}
	if oi.Tag != ni.Tag {
		return old, false, "other instructions (tag " + oi.Tag + ", this agent's " + ni.Tag + ")"
	}
	oids, ok1 := oi.MapIDs()
	nids, ok2 := ni.MapIDs()
	if !ok1 || !ok2 || len(oids) != len(nids) {
		return old, false, "other maps"
	}
	for i := range oids {
		if oids[i] == nids[i] {
			continue // an adopted pinned map
		}
		same, why := sameGlobals(oids[i], nids[i])
		if !same {
			return old, false, why
		}
	}
	return old, true, ""
}

// sameGlobals compares two maps the programs do not share: both must be
// their globals, and read-only ones (the configuration) must hold the same
// bytes. Mutable globals are each program's own state.
func sameGlobals(oid, nid ebpf.MapID) (bool, string) {
	om, err1 := ebpf.NewMapFromID(oid)
	nm, err2 := ebpf.NewMapFromID(nid)
	defer func() {
		for _, m := range []*ebpf.Map{om, nm} {
			if m != nil {
				m.Close()
			}
		}
	}()
	if err := errors.Join(err1, err2); err != nil {
		return false, "open maps: " + err.Error()
	}
	oinfo, err1 := om.Info()
	ninfo, err2 := nm.Info()
	if err := errors.Join(err1, err2); err != nil {
		return false, "map info: " + err.Error()
	}
	if oinfo.Name != ninfo.Name || !strings.Contains(oinfo.Name, ".") {
		return false, "a counter map is not the pinned one (" + oinfo.Name + ")"
	}
	if !strings.HasSuffix(oinfo.Name, ".rodata") {
		return true, ""
	}
	ov, nv := make([]byte, om.ValueSize()), make([]byte, nm.ValueSize())
	if err := errors.Join(om.Lookup(uint32(0), &ov), nm.Lookup(uint32(0), &nv)); err != nil {
		return false, "read configuration: " + err.Error()
	}
	if !bytes.Equal(ov, nv) {
		return false, "another configuration (e.g. --netns or --evidence.per-second changed)"
	}
	return true, ""
}

// Unpin removes what agents pinned under dir: the programs detach, and the
// maps go with the last program or reader holding them. Removing what is
// not there is not an error. It is the uninstall path (nbs-agent
// --bpf.unpin).
func Unpin(dir string) error {
	// Only ever in bpffs: a mistyped --bpf.pin-dir must not remove files.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("unpin %s: %w", dir, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("unpin %s: not a bpffs directory; removing nothing", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("unpin %s: %w", dir, err)
	}
	return nil
}
