// Package latencyflows is the latency/flows branch: per-flow detail (the flows
// with the most retransmits, their smoothed RTT) sampled from tcp_probe by a
// BPF program the agent attaches only while the latency branch is in
// trouble or an operator is looking (source.Adaptive).
package latencyflows

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	probe "github.com/nbs-project/nbs/agent/probe/latencyflows"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const capName = "bpf.latency.flows"

// TopFlows is how many flows the evidence names per interval.
const TopFlows = 10

// forgetAfter drops flows not sampled for this long from the kernel table.
const forgetAfter = 2 * time.Minute

// Options configure Open.
type Options struct {
	source.Env
	// MinGap and SamplesPerSec tune the kernel's rate limits (0: defaults).
	MinGap        time.Duration
	SamplesPerSec uint32
}

// Source reads the sampled flows while attached.
type Source struct {
	probe *probe.Probe
	why   string
	log   *slog.Logger

	mu       sync.Mutex
	active   bool
	lastMono uint64            // CLOCK_MONOTONIC ns of the previous collection
	retrans  map[uint64]uint32 // total_retrans per flow at the previous collection
	retired  []string
}

// Open loads the program without attaching it, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	log := opts.Log(catalog.LatencyFlows)
	s := &Source{log: log, retrans: map[uint64]uint32{}}
	if opts.DisableBPF {
		s.why = source.BPFDisabled
		return s, nil
	}
	p, err := probe.Load(probe.Options{NetnsInode: opts.BPFNetns(), MinGap: opts.MinGap, SamplesPerSec: opts.SamplesPerSec, Logger: log})
	if err != nil {
		s.why = err.Error()
		log.Warn("latency/flows: BPF unavailable; per-flow detail will not be measured", "err", err)
		return s, nil
	}
	s.probe = p
	return s, nil
}

func (s *Source) Name() string    { return "latency/flows (bpf, triggered)" }
func (s *Source) Trigger() string { return catalog.Latency }
func (s *Source) Branch() string  { return catalog.LatencyFlows }

func (s *Source) Capabilities() []*nbsv1.Capability {
	if s.probe == nil {
		return []*nbsv1.Capability{{Name: capName, Available: false, Reason: s.why}}
	}
	return []*nbsv1.Capability{{Name: capName, Available: true, Reason: "attached only while triggered or expanded"}}
}

// Programs returns the probe's program, nil when it is unavailable.
func (s *Source) Programs() map[string]*ebpf.Program {
	if s.probe == nil {
		return nil
	}
	return s.probe.Programs()
}

func (s *Source) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for CLOCK_MONOTONIC
	return uint64(ts.Nano())
}

// SetActive attaches or detaches the program. Detaching retires the
// branch's metrics, so they vanish rather than go UNKNOWN.
func (s *Source) SetActive(_ context.Context, on bool) error {
	if s.probe == nil {
		if on {
			return fmt.Errorf("per-flow sampling unavailable: %s", s.why)
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if on == s.active {
		return nil
	}
	if !on {
		err := s.probe.Detach()
		s.active = false
		s.retired = append(s.retired, catalog.LatencyFlows)
		return err
	}
	if err := s.probe.Attach(); err != nil {
		return err
	}
	s.active, s.lastMono, s.retrans = true, monoNow(), map[uint64]uint32{}
	return nil
}

type flowDelta struct {
	f       probe.Flow
	retrans uint32
}

func (s *Source) Collect(context.Context) (source.Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := source.Reading{Retired: s.retired}
	s.retired = nil
	if !s.active {
		return r, nil
	}
	now := monoNow()
	fs, err := s.probe.Flows()
	if err != nil {
		return r, fmt.Errorf("read sampled flows: %w", err)
	}
	srtt := loglinear.New()
	var sampled, retransmitting int
	var moved []flowDelta
	seen := make(map[uint64]uint32, len(fs))
	for _, f := range fs {
		seen[f.Cookie] = f.TotalRetrans
		if f.LastNs <= s.lastMono {
			continue // not sampled this interval
		}
		sampled++
		srtt.Record(uint64(f.SRTT.Nanoseconds()))
		prev, ok := s.retrans[f.Cookie]
		if !ok {
			prev = f.FirstRetrans
		}
		if f.TotalRetrans > prev {
			retransmitting++
			moved = append(moved, flowDelta{f: f, retrans: f.TotalRetrans - prev})
		}
	}
	s.retrans, s.lastMono = seen, now
	if err := s.probe.Forget(func(f probe.Flow) bool { return now-f.LastNs > uint64(forgetAfter) }); err != nil {
		s.log.Warn("latency/flows: forget idle flows", "err", err)
	}

	sort.Slice(moved, func(i, j int) bool {
		if moved[i].retrans != moved[j].retrans {
			return moved[i].retrans > moved[j].retrans
		}
		return moved[i].f.SRTT > moved[j].f.SRTT
	})
	wall := time.Now().UnixNano()
	for _, m := range moved[:min(len(moved), TopFlows)] {
		f := m.f
		r.Events = append(r.Events, &nbsv1.Event{MetricId: catalog.LatencyFlows, TimeUnixNano: wall, Fields: map[string]string{
			"src": f.Src.String(), "dst": f.Dst.String(), "netns": strconv.FormatUint(uint64(f.Netns), 10),
			"retransmits":       strconv.FormatUint(uint64(m.retrans), 10),
			"total_retransmits": strconv.FormatUint(uint64(f.TotalRetrans), 10),
			"srtt_ms":           strconv.FormatFloat(float64(f.SRTT)/1e6, 'f', 3, 64),
			"rttvar_ms":         strconv.FormatFloat(float64(f.RTTVar)/1e6, 'f', 3, 64),
			"min_rtt_ms":        strconv.FormatFloat(float64(f.MinRTT)/1e6, 'f', 3, 64),
			"cwnd":              strconv.FormatUint(uint64(f.Cwnd), 10),
		}})
	}
	r.Metrics = catalog.LatencyFlowsTree()
	r.Gauges = map[string]float64{catalog.LatencyFlows: float64(retransmitting), catalog.LatencyFlowsSampled: float64(sampled)}
	r.Histograms = map[string]*loglinear.Histogram{catalog.LatencyFlowsSRTT: srtt}
	return r, nil
}

// Stats returns the probe's counts (zero when unavailable).
func (s *Source) Stats() (probe.Stats, error) {
	if s.probe == nil {
		return probe.Stats{}, nil
	}
	return s.probe.Stats()
}

func (s *Source) Close() error {
	if s.probe == nil {
		return nil
	}
	return s.probe.Close()
}
