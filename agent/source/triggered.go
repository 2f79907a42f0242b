package source

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/ebpf"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// TriggeredProbe is the probe of a triggered source: its programs are
// loaded once and attached only on demand.
type TriggeredProbe[S any] interface {
	Programs() map[string]*ebpf.Program
	Attach() error
	Detach() error
	Stats() (S, error)
	Close() error
}

// TriggeredSpec describes a triggered source to NewTriggered.
type TriggeredSpec[P TriggeredProbe[S], S any] struct {
	Name       string // "latency/qdisc (bpf, triggered)"
	Capability string // "bpf.latency.qdisc"
	Trigger    string // see Adaptive
	Branch     string // see Adaptive
	// What names what the source measures, for messages ("qdisc sojourn").
	What string
	// Load loads the programs without attaching them; they count in the
	// namespace netnsInode, 0 for every namespace.
	Load func(netnsInode uint32, log *slog.Logger) (P, error)
	// Attached runs after the programs are attached and Detached after they
	// are detached, both under the lock Collect holds, so the source can
	// reset what it counts from; either may be nil.
	Attached func(P) error
	Detached func()
	// AlwaysOn keeps the programs attached whenever the overhead budget
	// allows, not only while triggered or expanded (see Standing).
	AlwaysOn bool
	// Runs, when set, gives from the probe's counts each program's runs in
	// scope (past its namespace test), by the keys of Programs (see Scoped).
	Runs func(S) map[string]uint64
}

// Triggered is what every triggered source (Adaptive) does alike: load its
// probe, or say why it cannot; attach and detach it; retire the branch's
// metrics on detaching, so they vanish rather than go UNKNOWN. A source
// embeds it and adds Collect, built on WhileAttached.
type Triggered[P TriggeredProbe[S], S any] struct {
	spec   TriggeredSpec[P, S]
	probe  P
	loaded bool
	why    string // why not loaded

	mu      sync.Mutex
	active  bool
	retired []string
}

// NewTriggered loads the probe without attaching it, or returns a source
// that never measures and says why.
func NewTriggered[P TriggeredProbe[S], S any](env Env, spec TriggeredSpec[P, S]) *Triggered[P, S] {
	t := &Triggered[P, S]{spec: spec}
	if env.DisableBPF {
		t.why = BPFDisabled
		return t
	}
	log := env.Log(spec.Branch)
	p, err := spec.Load(env.BPFNetns(), log)
	if err != nil {
		t.why = err.Error()
		log.Warn(spec.Branch+": BPF unavailable; "+spec.What+" will not be measured", "err", err)
		return t
	}
	t.probe, t.loaded = p, true
	return t
}

func (t *Triggered[P, S]) Name() string    { return t.spec.Name }
func (t *Triggered[P, S]) Trigger() string { return t.spec.Trigger }
func (t *Triggered[P, S]) Branch() string  { return t.spec.Branch }

func (t *Triggered[P, S]) Capabilities() []*nbsv1.Capability {
	if !t.loaded {
		return []*nbsv1.Capability{{Name: t.spec.Capability, Available: false, Reason: t.why}}
	}
	if t.spec.AlwaysOn {
		return []*nbsv1.Capability{{Name: t.spec.Capability, Available: true, Reason: "always attached, but detached for a rest while over --overhead.budget"}}
	}
	return []*nbsv1.Capability{{Name: t.spec.Capability, Available: true, Reason: "attached only while triggered or expanded"}}
}

// AlwaysOn says whether the source wants its programs attached whenever
// the budget allows (Standing).
func (t *Triggered[P, S]) AlwaysOn() bool { return t.spec.AlwaysOn }

// RunsInScope returns each program's runs in scope (Scoped); nil when the
// source does not count them or is unavailable.
func (t *Triggered[P, S]) RunsInScope() (map[string]uint64, error) {
	if !t.loaded || t.spec.Runs == nil {
		return nil, nil
	}
	// A probe that counts every namespace has no runs out of scope: its
	// Stats (a probe's histograms, read twice an interval for nothing)
	// are not read.
	if sc, ok := any(t.probe).(interface{ Scoped() bool }); ok && !sc.Scoped() {
		return nil, nil
	}
	st, err := t.probe.Stats()
	if err != nil {
		return nil, err
	}
	return t.spec.Runs(st), nil
}

// Programs returns the probe's programs, nil when it is unavailable.
func (t *Triggered[P, S]) Programs() map[string]*ebpf.Program {
	if !t.loaded {
		return nil
	}
	return t.probe.Programs()
}

func (t *Triggered[P, S]) Active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// SetActive attaches or detaches the programs. Detaching retires the
// branch's metrics.
func (t *Triggered[P, S]) SetActive(_ context.Context, on bool) error {
	if !t.loaded {
		if on {
			return fmt.Errorf("%s unavailable: %s", t.spec.What, t.why)
		}
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if on == t.active {
		return nil
	}
	if !on {
		err := t.probe.Detach()
		t.active = false
		t.retired = append(t.retired, t.spec.Branch)
		if t.spec.Detached != nil {
			t.spec.Detached()
		}
		return err
	}
	if err := t.probe.Attach(); err != nil {
		return err
	}
	t.active = true
	if t.spec.Attached != nil {
		return t.spec.Attached(t.probe)
	}
	return nil
}

// WhileAttached returns the metrics retired since the previous collection
// and, while the programs are attached, lets collect read the probe into
// the reading, under the same lock as SetActive.
func (t *Triggered[P, S]) WhileAttached(collect func(p P, r *Reading) error) (Reading, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := Reading{Retired: t.retired}
	t.retired = nil
	if !t.active {
		return r, nil
	}
	err := collect(t.probe, &r)
	return r, err
}

// WithProbe runs fn with the probe; it does nothing when the probe is
// unavailable. fn must not call back into t.
func (t *Triggered[P, S]) WithProbe(fn func(P) error) error {
	if !t.loaded {
		return nil
	}
	return fn(t.probe)
}

// Stats returns the probe's counts (zero when unavailable).
func (t *Triggered[P, S]) Stats() (S, error) {
	if !t.loaded {
		var zero S
		return zero, nil
	}
	return t.probe.Stats()
}

func (t *Triggered[P, S]) Close() error {
	if !t.loaded {
		return nil
	}
	return t.probe.Close()
}
