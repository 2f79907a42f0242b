package source

import (
	"log/slog"
	"path/filepath"

	"github.com/nbs-project/nbs/agent/owner"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/internal/netns"
)

// BPFDisabled is why a source measures nothing by BPF when the operator
// turned it off.
const BPFDisabled = "disabled by --bpf=false"

// Env is what every source is opened with; each source package's Options
// embeds it and adds only what is particular to that branch.
type Env struct {
	// Netns is the watched namespace. /proc counters always come from it.
	Netns netns.Handle
	// AllNetns lets BPF programs count in every namespace (a node's pods and
	// containers), not only in Netns.
	AllNetns bool
	// DisableBPF forces the /proc fallbacks and leaves BPF-only branches
	// out (--bpf=false).
	DisableBPF bool
	// EvidencePerSecond caps evidence events in the kernel; 0 means each
	// probe's default.
	EvidencePerSecond uint32
	// Logger is the agent's; Log gives each branch its own.
	Logger *slog.Logger
	// Proc is shared by every source that reads Netns's SNMP counters, so
	// one collection reads each file once; nil gives each source its own.
	Proc *procnet.Reader
	// Owners names what owns each network namespace, shared by every
	// source that splits by namespace; nil gives each source its own.
	Owners *owner.Resolver
	// TopOwners is how many owners get a child of their own under a
	// per-namespace counter; 0 means catalog.DefaultTopOwners.
	TopOwners int
	// BTF is the kernel BTF the probes share while they load; nil gives
	// each load its own read.
	BTF *bpfload.KernelBTF
	// PinDir is the bpffs directory where the always-on counter probes pin
	// their maps and links, each in a directory of its own (PinDirOf), so
	// they go on counting between agents (bpfload's pin.go); empty pins
	// nothing.
	PinDir string
}

// PinDirOf is where the probe of one BPF object pins, "" when nothing is
// pinned.
func (e Env) PinDirOf(object string) string {
	if e.PinDir == "" {
		return ""
	}
	return filepath.Join(e.PinDir, object)
}

// Continuing is a source whose counters may continue the previous
// agent's: its probe adopted the maps that agent pinned. The first reading
// of such a counter is not a baseline: the agent reports what that agent
// had not reported yet. Continues is asked of each counter of the source's
// first reading; a source whose counters come from several places (the
// agent branch, say, with losses kept in other probes' pinned maps) answers
// for each.
type Continuing interface {
	Continues(counterID string) bool
}

// SinceBoot is a source some of whose counters are the kernel's own
// cumulative counts (/proc/net/snmp, netstat, softnet_stat), reported as
// the kernel has them: since boot, in Env.Netns (softnet host-wide). The
// agent, not the source, takes them from its start (agent/app's ledger):
// from the first reading, or, when the previous agent ran on the same boot
// and read the same namespace, from what that agent last reported, so a
// restart loses none of what the kernel counted meanwhile. SinceBoot is
// asked of each counter the source reports; one seen for the first time
// after the agent's start counts from there, never from boot.
type SinceBoot interface {
	SinceBoot(counterID string) bool
}

// SetEnv replaces the environment; a source's Options embed Env, so the
// agent can give every source the same one.
func (e *Env) SetEnv(v Env) { *e = v }

// Log returns the logger of one branch ("latency/qdisc"), which discards
// everything when the environment has no logger (tests).
func (e Env) Log(branch string) *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger.With("source", branch)
}

// BPFNetns is the namespace inode BPF programs count in: 0 for every
// namespace.
func (e Env) BPFNetns() uint32 {
	if e.AllNetns {
		return 0
	}
	return e.Netns.Inode
}

// OwnerSplit returns a splitter of per-namespace counters by owner, on the
// shared resolver or one of its own when none is shared.
func (e Env) OwnerSplit() *Owners {
	r := e.Owners
	if r == nil {
		r = owner.New(owner.Options{Logger: e.Logger})
	}
	return NewOwners(r, e.TopOwners)
}

// ProcReader returns the shared reader of Netns's SNMP counters, or a
// reader of its own that reads on every call when none is shared.
func (e Env) ProcReader() *procnet.Reader {
	if e.Proc != nil {
		return e.Proc
	}
	return procnet.NewReader(e.Netns.ReadFile)
}
