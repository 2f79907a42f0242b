package source

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
)

type fakeProbe struct {
	attachErr, detachErr      error
	attaches, detaches, close int
}

func (p *fakeProbe) Programs() map[string]*ebpf.Program { return map[string]*ebpf.Program{"tp": nil} }
func (p *fakeProbe) Attach() error                      { p.attaches++; return p.attachErr }
func (p *fakeProbe) Detach() error                      { p.detaches++; return p.detachErr }
func (p *fakeProbe) Stats() (int, error)                { return 42, nil }
func (p *fakeProbe) Close() error                       { p.close++; return nil }

// hooks records the calls of Attached and Detached, and of the collect
// function WhileAttached runs.
type hooks struct{ attached, detached, collected int }

func newFake(t *testing.T, env Env, p *fakeProbe, loadErr error) (*Triggered[*fakeProbe, int], *hooks) {
	t.Helper()
	h := &hooks{}
	tr := NewTriggered(env, TriggeredSpec[*fakeProbe, int]{
		Name: "latency/x (bpf, triggered)", Capability: "bpf.latency.x", Trigger: "latency", Branch: "latency/x", What: "x",
		Load: func(netnsInode uint32, _ *slog.Logger) (*fakeProbe, error) {
			if netnsInode != env.BPFNetns() {
				t.Errorf("Load in netns %d, want %d", netnsInode, env.BPFNetns())
			}
			return p, loadErr
		},
		Attached: func(*fakeProbe) error { h.attached++; return nil },
		Detached: func() { h.detached++ },
	})
	return tr, h
}

func collectRetired(t *testing.T, tr *Triggered[*fakeProbe, int], h *hooks) []string {
	t.Helper()
	r, err := tr.WhileAttached(func(*fakeProbe, *Reading) error { h.collected++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return r.Retired
}

// TestTriggeredUnavailable: without BPF, or when the probe does not load,
// the source never measures, cannot be attached, and says why.
func TestTriggeredUnavailable(t *testing.T) {
	cases := []struct {
		name    string
		env     Env
		loadErr error
		why     string
	}{
		{"BPF off", Env{DisableBPF: true}, nil, BPFDisabled},
		{"load fails", Env{AllNetns: true}, errors.New("no BTF"), "no BTF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, h := newFake(t, c.env, &fakeProbe{}, c.loadErr)
			caps := tr.Capabilities()
			if len(caps) != 1 || caps[0].GetName() != "bpf.latency.x" || caps[0].GetAvailable() || caps[0].GetReason() != c.why {
				t.Errorf("capabilities %v, want bpf.latency.x unavailable because %q", caps, c.why)
			}
			if tr.Programs() != nil {
				t.Errorf("Programs() = %v, want nil", tr.Programs())
			}
			if err := tr.SetActive(context.Background(), true); err == nil || err.Error() != "x unavailable: "+c.why {
				t.Errorf("SetActive(true) = %v", err)
			}
			if err := tr.SetActive(context.Background(), false); err != nil || tr.Active() {
				t.Errorf("SetActive(false) = %v, active %v", err, tr.Active())
			}
			if st, err := tr.Stats(); st != 0 || err != nil {
				t.Errorf("Stats() = %d, %v; want zero", st, err)
			}
			if r := collectRetired(t, tr, h); r != nil || h.collected != 0 || h.attached != 0 {
				t.Errorf("retired %v, hooks %+v", r, *h)
			}
			if err := tr.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestTriggeredAttachDetach: attaching runs the probe and the source's
// hook once; collections read the probe only while attached; detaching
// retires the branch once.
func TestTriggeredAttachDetach(t *testing.T) {
	p := &fakeProbe{}
	tr, h := newFake(t, Env{}, p, nil)
	ctx := context.Background()
	if tr.Name() != "latency/x (bpf, triggered)" || tr.Trigger() != "latency" || tr.Branch() != "latency/x" {
		t.Errorf("Name, Trigger, Branch = %q, %q, %q", tr.Name(), tr.Trigger(), tr.Branch())
	}
	if caps := tr.Capabilities(); len(caps) != 1 || !caps[0].GetAvailable() {
		t.Errorf("capabilities %v, want available", caps)
	}
	if r := collectRetired(t, tr, h); r != nil || h.collected != 0 {
		t.Errorf("detached: retired %v, collected %d", r, h.collected)
	}
	for range 2 {
		if err := tr.SetActive(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if !tr.Active() || p.attaches != 1 || h.attached != 1 {
		t.Errorf("after two SetActive(true): active %v, attaches %d, hook %d", tr.Active(), p.attaches, h.attached)
	}
	if r := collectRetired(t, tr, h); r != nil || h.collected != 1 {
		t.Errorf("attached: retired %v, collected %d", r, h.collected)
	}

	p.detachErr = errors.New("detach failed")
	if err := tr.SetActive(ctx, false); !errors.Is(err, p.detachErr) {
		t.Errorf("SetActive(false) = %v, want the probe's error", err)
	}
	if tr.Active() || p.detaches != 1 || h.detached != 1 {
		t.Errorf("after SetActive(false): active %v, detaches %d, hook %d", tr.Active(), p.detaches, h.detached)
	}
	if r := collectRetired(t, tr, h); !slices.Equal(r, []string{"latency/x"}) || h.collected != 1 {
		t.Errorf("after detaching: retired %v, collected %d; want latency/x retired, no read", r, h.collected)
	}
	if r := collectRetired(t, tr, h); r != nil {
		t.Errorf("retired again: %v", r)
	}

	p.attachErr = errors.New("attach failed")
	if err := tr.SetActive(ctx, true); !errors.Is(err, p.attachErr) || tr.Active() || h.attached != 1 {
		t.Errorf("failed attach: %v, active %v, hook %d", err, tr.Active(), h.attached)
	}
	if st, err := tr.Stats(); st != 42 || err != nil {
		t.Errorf("Stats() = %d, %v", st, err)
	}
	if err := tr.Close(); err != nil || p.close != 1 {
		t.Errorf("Close() = %v, probe closed %d times", err, p.close)
	}
}
