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
// A pinned map that differs from this agent's only in size or flags is
// replaced by one holding its entries (carryOver), so its counts go on. One
// whose layout differs (an upgrade changed its type, key or value) cannot
// be read with this agent's types: it is replaced by a fresh one, and the
// object does not continue its counts (Continued); an evidence ring so
// replaced loses only the evidence not yet read from it.
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
			if err == nil {
				old.Close()
				o.pinsAdopted++
				continue
			}
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("pin %s: replace %s: %w", o.Name, path, err)
		}
		switch {
		case old != nil && copyable(old, ms):
			// Only its size or flags changed: the counts are read into
			// the new map once the old programs are detached (Attach).
			o.log().Warn(o.Name+": pinned map has another size or flags; replacing it, carrying its counts over", "map", path, "err", err)
			o.oldMaps = append(o.oldMaps, oldMap{name: ms.Name, m: old})
			o.pinsAdopted++
		case ms.Type == ebpf.RingBuf:
			o.log().Warn(o.Name+": pinned evidence ring cannot be adopted; replacing it, so evidence not yet read from it is lost", "map", path, "err", err)
			if old != nil {
				old.Close()
			}
		default:
			// An upgrade changed the layout (or the pin is not a map):
			// its counts cannot be read with this agent's types, so they
			// are replaced, and the agent says so rather than report a
			// jump.
			o.log().Warn(o.Name+": pinned map cannot be adopted; replacing it, so counts made since the previous agent's last report are lost",
				"map", path, "err", err)
			if old != nil {
				old.Close()
			}
			o.pinsReplaced++
		}
	}
	return &pinned, nil
}

// oldMap is a pinned map replaced by one of another size, whose entries
// go into its replacement.
type oldMap struct {
	name string
	m    *ebpf.Map
}

// copyable says whether old's entries can be written into a map made from
// ms as they are: a hash or array map of the same type, key and value size.
func copyable(old *ebpf.Map, ms *ebpf.MapSpec) bool {
	switch ms.Type {
	case ebpf.Hash, ebpf.PerCPUHash, ebpf.Array, ebpf.PerCPUArray, ebpf.LRUHash, ebpf.LRUCPUHash:
	default:
		return false
	}
	return old.Type() == ms.Type && old.KeySize() == ms.KeySize && old.ValueSize() == ms.ValueSize
}

// carryOver writes the entries of the replaced maps into their
// replacements, once no old program writes them any more, and frees them.
// An entry that does not fit (a smaller map) is lost and makes the object
// not continue.
func (o *Object) carryOver() {
	for _, om := range o.oldMaps {
		n, err := copyEntries(om.m, filepath.Join(o.PinDir, om.name))
		if err != nil {
			o.log().Warn(o.Name+": could not carry all counts over to the replaced map; they are lost", "map", om.name, "copied", n, "err", err)
			o.pinsReplaced++
		} else {
			o.log().Info(o.Name+": carried the counts of the replaced map over", "map", om.name, "entries", n)
		}
		om.m.Close()
	}
	o.oldMaps = nil
}

func copyEntries(from *ebpf.Map, to string) (int, error) {
	dst, err := ebpf.LoadPinnedMap(to, nil)
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	perCPU := from.Type() == ebpf.PerCPUHash || from.Type() == ebpf.PerCPUArray || from.Type() == ebpf.LRUCPUHash
	var (
		key    []byte
		one    []byte
		percpu [][]byte
		n      int
	)
	it := from.Iterate()
	for {
		var ok bool
		if perCPU {
			ok = it.Next(&key, &percpu)
		} else {
			ok = it.Next(&key, &one)
		}
		if !ok {
			break
		}
		if perCPU {
			err = dst.Put(key, percpu)
		} else {
			err = dst.Put(key, one)
		}
		if err != nil {
			return n, fmt.Errorf("write entry: %w", err)
		}
		n++
	}
	return n, it.Err()
}

// Continued says whether the object's counter maps were adopted from a
// previous agent, every one of them, so its counts continue that agent's:
// the agent then reports what was counted since that agent's last report.
func (o *Object) Continued() bool {
	return o.PinDir != "" && o.pinsAdopted > 0 && o.pinsReplaced == 0
}

// attachPinned attaches the points of an always-on probe with a PinDir:
// first it adopts each link pinned for a point when that runs this agent's
// program, and detaches the others, so no old program writes the maps any
// more; then it carries the counts of replaced maps over (carryOver); then
// it attaches the points it did not adopt, and pins their links. On error
// it detaches what it attached, as Attach does.
func (o *Object) attachPinned() error {
	if o.adopted == nil {
		o.adopted = map[string]*ebpf.Program{}
	}
	adopted := make([]link.Link, len(o.Points))
	for i, pt := range o.Points {
		l, err := o.takePinned(pt)
		if err != nil {
			for _, a := range adopted {
				if a != nil {
					a.Close()
				}
			}
			return errors.Join(fmt.Errorf("attach %s%s: %w", pt.Name, pt.where, err), o.Detach())
		}
		adopted[i] = l
	}
	o.carryOver()
	for i, pt := range o.Points {
		l := adopted[i]
		if l == nil {
			var err error
			if l, err = pt.attach(pt.Program); err != nil {
				for _, a := range adopted[i+1:] {
					if a != nil {
						a.Close()
					}
				}
				return errors.Join(fmt.Errorf("attach %s%s: %w (%s)", pt.Name, pt.where, err, o.Hint(err)), o.unpinLinks(), o.Detach())
			}
			path := filepath.Join(o.PinDir, "link_"+pt.Name)
			if err := l.Pin(path); err != nil {
				// Attached all the same: it counts while this agent runs.
				o.log().Warn(o.Name+": cannot pin the link; the program stops with this agent", "path", path, "err", err)
			}
		}
		o.links = append(o.links, l)
		o.attached = append(o.attached, pt.Name)
	}
	return nil
}

// takePinned returns the link pinned for pt when it runs this agent's
// program (adopting it), and otherwise removes the pinned link, detaching
// its program, and returns nil.
func (o *Object) takePinned(pt Point) (link.Link, error) {
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
		// Detached before the new program attaches: both attached would
		// count each event twice in the shared maps.
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
	return nil, nil
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
