package flows

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/nbs-project/nbs/agent/owner"
	"github.com/nbs-project/nbs/internal/netns"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// refreshEvery is how old a namespace's addresses may get before they are
// read again when nothing else says they changed.
const refreshEvery = 30 * time.Second

// holders lists the addresses of every network namespace on the node (the
// host's and each pod's, container's or `ip netns` one's), read by netlink
// inside each, and cached: a namespace's addresses are read when it is new
// (an address a pod that went held passes to a new pod: it is read as its
// namespace is found), when it had none and was found less than
// refreshEvery ago (a pod whose address the CNI had not set yet) and every
// refreshEvery. Not every namespace's when one came or went: on a busy node
// that is nearly every interval, a netlink dump in each namespace (most of
// an idle agent's reading of addresses, bench/agentcost BenchmarkAgentIdle). The namespaces are those the owners' resolver finds
// (owner.Resolver.Namespaces): its walk of /proc serves the lookup of
// their owners that follows.
//
// A namespace is known by its inode and the path it was found at: the
// kernel reuses the inode of a namespace that went, so one found at another
// path is taken for a new namespace (the owners' resolver is told to name
// it anew), and the one that had the inode is listed once more, with its
// own owner, as every namespace that went is.
type holders struct {
	resolver *owner.Resolver
	log      *slog.Logger

	// only, when set, is the one namespace whose addresses are listed:
	// an agent watching one namespace (--netns) is the node of that
	// namespace alone.
	only *netns.Handle

	known map[nsKey]*nsAddrs
	paths map[uint32]string // the live namespaces' paths, by inode
}

type nsKey struct {
	ino  uint32
	path string
}

type nsAddrs struct {
	addrs []netip.Addr
	read  time.Time
	found time.Time // first read
	owner owner.Owner
	// gone is set when the namespace was not found: it held its
	// addresses during the interval it went, so it is reported once more.
	gone bool
}

func newHolders(r *owner.Resolver, only *netns.Handle, log *slog.Logger) *holders {
	return &holders{resolver: r, only: only, log: log, known: map[nsKey]*nsAddrs{}}
}

// collect returns every (address, owner) held during the interval.
func (h *holders) collect(ctx context.Context) []*nbsv1.AddressHolder {
	now := time.Now()
	live := map[nsKey]bool{}
	h.paths = h.namespaces()
	for ino, path := range h.paths {
		live[nsKey{ino, path}] = true
	}
	byIno := map[uint32]nsKey{}
	for k, ns := range h.known {
		if !ns.gone {
			byIno[k.ino] = k
		}
	}
	var reused []uint32
	for k := range live {
		if _, ok := h.known[k]; ok {
			continue
		}
		if old, ok := byIno[k.ino]; ok && old != k {
			reused = append(reused, k.ino)
		}
	}
	for k, ns := range h.known {
		if live[k] {
			continue
		}
		if ns.gone {
			delete(h.known, k)
		} else {
			ns.gone = true
		}
	}
	if len(reused) > 0 {
		h.resolver.Forget(reused...)
	}
	var inodes []uint32
	for k := range live {
		if ctx.Err() != nil {
			break
		}
		ns := h.known[k]
		if ns == nil {
			ns = &nsAddrs{}
			h.known[k] = ns
		}
		if ns.found.IsZero() {
			ns.found = now
		}
		// An empty namespace is read each interval only while it is new:
		// an idle node's namespaces without an address (a build's, a
		// test's) cost a netlink dump each, every interval, otherwise.
		empty := len(ns.addrs) == 0 && now.Sub(ns.found) < refreshEvery
		if ns.read.IsZero() || empty || now.Sub(ns.read) >= refreshEvery {
			addrs, err := readAddrs(netns.Handle{Path: k.path, Inode: k.ino})
			if err != nil {
				// Gone between the scan and the read, usually.
				h.log.Debug("flows: read a namespace's addresses", "netns", k.path, "err", err)
				continue
			}
			ns.addrs, ns.read = addrs, now
		}
		if len(ns.addrs) > 0 {
			inodes = append(inodes, k.ino)
		}
	}
	owners := h.resolver.Lookup(inodes...)
	type held struct {
		addr  netip.Addr
		owner owner.Owner
	}
	var all []held
	for k, ns := range h.known {
		if !ns.gone {
			if live[k] && len(ns.addrs) > 0 {
				ns.owner = owners[k.ino]
			}
		}
		if ns.owner.Kind == "" || ns.owner.Kind == owner.Unknown {
			continue // no name the collector could show
		}
		for _, a := range ns.addrs {
			all = append(all, held{a, ns.owner})
		}
	}
	slices.SortFunc(all, func(x, y held) int { return cmp.Or(x.addr.Compare(y.addr), cmp.Compare(x.owner.ID(), y.owner.ID())) })
	all = slices.CompactFunc(all, func(x, y held) bool { return x.addr == y.addr && x.owner.ID() == y.owner.ID() })
	// Not capped here: what a report carries is capped where reports are
	// made (Source.holdAddresses), so a holder left out is counted once a
	// report, not once an interval.
	out := make([]*nbsv1.AddressHolder, 0, len(all))
	for _, x := range all {
		out = append(out, &nbsv1.AddressHolder{Address: x.addr.String(), Owner: flowOwner(x.owner)})
	}
	return out
}

// namespaces finds every network namespace a process is in or an `ip netns`
// name holds, with a path to enter it by.
func (h *holders) namespaces() map[uint32]string {
	if h.only != nil {
		return map[uint32]string{h.only.Inode: h.only.Path}
	}
	return h.resolver.Namespaces()
}

// readAddrs lists a namespace's addresses but loopback and link-local ones
// (never a peer another node sees).
func readAddrs(h netns.Handle) ([]netip.Addr, error) {
	var out []netip.Addr
	err := h.Do(func() error {
		var err error
		out, err = interfaceAddrs()
		return err
	})
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), err
}

// interfaceAddrs is net.InterfaceAddrs' addresses, as netip.Addrs, but
// loopback, link-local and unspecified ones, from one netlink dump of the
// addresses: net.InterfaceAddrs dumps the links too, to name each
// address's interface, which is never used here and was the larger half of
// the work (a link's dump carries its statistics and attributes).
func interfaceAddrs() ([]netip.Addr, error) {
	tab, err := syscall.NetlinkRIB(syscall.RTM_GETADDR, syscall.AF_UNSPEC)
	if err != nil {
		return nil, os.NewSyscallError("netlinkrib", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(tab)
	if err != nil {
		return nil, os.NewSyscallError("parsenetlinkmessage", err)
	}
	var out []netip.Addr
	for _, m := range msgs {
		if m.Header.Type == syscall.NLMSG_DONE {
			break
		}
		if m.Header.Type != syscall.RTM_NEWADDR || len(m.Data) < syscall.SizeofIfAddrmsg {
			continue
		}
		family := m.Data[0] // struct ifaddrmsg's ifa_family
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return nil, os.NewSyscallError("parsenetlinkrouteattr", err)
		}
		if ip, ok := ifAddr(family, attrs); ok {
			ip = ip.Unmap()
			if !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
				out = append(out, ip)
			}
		}
	}
	return out, nil
}

// ifAddr is the address of an RTM_NEWADDR as net.InterfaceAddrs takes it:
// the local address of a point-to-point one (IFA_LOCAL), else the first
// attribute's value.
func ifAddr(family byte, attrs []syscall.NetlinkRouteAttr) (netip.Addr, bool) {
	p2p := slices.ContainsFunc(attrs, func(a syscall.NetlinkRouteAttr) bool { return a.Attr.Type == syscall.IFA_LOCAL })
	for _, a := range attrs {
		if p2p && a.Attr.Type == syscall.IFA_ADDRESS {
			continue
		}
		switch {
		case family == syscall.AF_INET && len(a.Value) >= 4:
			return netip.AddrFrom4([4]byte(a.Value[:4])), true
		case family == syscall.AF_INET6 && len(a.Value) >= 16:
			return netip.AddrFrom16([16]byte(a.Value[:16])), true
		}
		return netip.Addr{}, false
	}
	return netip.Addr{}, false
}

// path is a way into namespace ino, as last found.
func (h *holders) path(ino uint32) (string, bool) {
	p, ok := h.paths[ino]
	return p, ok
}
