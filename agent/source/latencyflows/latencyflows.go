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
	*source.Triggered[*probe.Probe, probe.Stats]
	log *slog.Logger

	// Guarded by Triggered's lock.
	lastMono uint64            // CLOCK_MONOTONIC ns of the previous collection
	retrans  map[uint64]uint32 // total_retrans per flow at the previous collection
	// spare is the map before retrans, cleared and filled anew by the
	// next collection: a full table is 8,192 flows, every collection.
	spare map[uint64]uint32

	mu     sync.Mutex // guards kept and capped, read by the agent branch
	kept   uint64     // flows named in events, since the start
	capped uint64     // retransmitting flows beyond TopFlows, not named
}

// CapTableFull: a flow the kernel's table of sampled flows had no room
// for, so its samples were given up.
const CapTableFull = "table_full"

// EvidenceCounts says what the sampling gave up (source.EvidenceLosses):
// samples the kernel's per-CPU rate limit withheld (rate_limit), flows the
// kernel's full table could not take (table_full), and retransmitting
// flows beyond the TopFlows an interval names (interval_cap). Kept are the
// flows named in events. All count from the agent's start, attached or
// not; nothing when the probe could not load.
func (s *Source) EvidenceCounts() (source.EvidenceCounts, error) {
	c := source.EvidenceCounts{Branch: catalog.LatencyFlows}
	if s.Programs() == nil {
		return c, nil
	}
	st, err := s.Stats()
	if err != nil {
		return c, fmt.Errorf("read latency/flows sampling losses: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Kept = s.kept
	c.Dropped = map[string]uint64{source.CapRateLimit: st.Suppressed, CapTableFull: st.TableFull, source.CapInterval: s.capped}
	return c, nil
}

// Open loads the program without attaching it, or returns a source that
// never measures and says why.
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{log: opts.Log(catalog.LatencyFlows), retrans: map[uint64]uint32{}}
	s.Triggered = source.NewTriggered(opts.Env, source.TriggeredSpec[*probe.Probe, probe.Stats]{
		Name: "latency/flows (bpf, triggered)", Capability: capName, Trigger: catalog.Latency, Branch: catalog.LatencyFlows,
		What: "per-flow detail",
		Load: func(netnsInode uint32, log *slog.Logger) (*probe.Probe, error) {
			return probe.Load(probe.Options{NetnsInode: netnsInode, MinGap: opts.MinGap, SamplesPerSec: opts.SamplesPerSec, Logger: log, BTF: opts.BTF})
		},
		Attached: func(*probe.Probe) error {
			s.lastMono, s.retrans, s.spare = monoNow(), map[uint64]uint32{}, nil
			return nil
		},
	})
	return s, nil
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for CLOCK_MONOTONIC
	return uint64(ts.Nano())
}

type flowDelta struct {
	f       probe.Flow
	retrans uint32
}

func (s *Source) Collect(context.Context) (source.Reading, error) {
	return s.WhileAttached(s.collect)
}

func (s *Source) collect(p *probe.Probe, r *source.Reading) error {
	now := monoNow()
	srtt := loglinear.New()
	var sampled, retransmitting int
	var moved []flowDelta
	var stale []uint64
	seen := s.spare
	if seen == nil {
		seen = map[uint64]uint32{}
	}
	clear(seen)
	err := p.EachFlow(func(f probe.Flow) {
		seen[f.Cookie] = f.TotalRetrans
		if now-f.LastNs > uint64(forgetAfter) {
			stale = append(stale, f.Cookie)
		}
		if f.LastNs <= s.lastMono {
			return // not sampled this interval
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
	})
	if err != nil {
		// The map just filled is of no use: the next collection
		// compares with the last complete one.
		return fmt.Errorf("read sampled flows: %w", err)
	}
	s.retrans, s.spare, s.lastMono = seen, s.retrans, now
	// The flows just read say which to forget: no second pass over the
	// table (a full one of a busy node is 8,192 flows).
	if err := p.Delete(stale); err != nil {
		s.log.Warn("latency/flows: forget idle flows", "err", err)
	}

	sort.Slice(moved, func(i, j int) bool {
		if moved[i].retrans != moved[j].retrans {
			return moved[i].retrans > moved[j].retrans
		}
		return moved[i].f.SRTT > moved[j].f.SRTT
	})
	wall := time.Now().UnixNano()
	s.mu.Lock()
	s.kept += uint64(min(len(moved), TopFlows))
	s.capped += uint64(len(moved) - min(len(moved), TopFlows))
	s.mu.Unlock()
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
	return nil
}
