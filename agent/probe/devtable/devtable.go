// Package devtable reads the device table that per-device probes
// (latency/qdisc, latency/sizes) keep beside their per-CPU counters: one
// entry per network device their programs met, keyed by namespace and
// ifindex, holding the device's name and the index of its counters.
package devtable

import (
	"fmt"
	"structs"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Device is a network device as the kernel identifies it.
type Device struct {
	Netns   uint32
	Ifindex uint32
	Name    string
}

// key and info mirror the programs' {netns, ifindex} key and
// {name[16], index, pad} value (struct nbs_qdisc_dev, nbs_sizes_dev and
// their _info).
type key struct {
	_       structs.HostLayout
	Netns   uint32
	Ifindex uint32
}

type info struct {
	_     structs.HostLayout
	Name  [16]uint8
	Index uint32
	Pad   uint32
}

// Each calls fn for every device of the table m with the index of its
// counters, stopping at fn's first error, which it returns as is.
func Each(m *ebpf.Map, fn func(d Device, index uint32) error) error {
	var (
		k key
		v info
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if err := fn(Device{Netns: k.Netns, Ifindex: k.Ifindex, Name: Name(unix.ByteSliceToString(v.Name[:]), k.Ifindex)}, v.Index); err != nil {
			return err
		}
	}
	return it.Err()
}

// Name is the device name a program recorded, or "if<ifindex>" when it
// recorded none, so every device has one to show.
func Name(recorded string, ifindex uint32) string {
	if recorded != "" {
		return recorded
	}
	return fmt.Sprintf("if%d", ifindex)
}
