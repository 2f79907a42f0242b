// Package bpfstats measures what BPF programs cost per run while a benchmark
// loads them, from the kernel's run-time statistics (BPF_ENABLE_STATS, read
// with Program.Stats()). Each program is sampled every 100 ms, so the median
// of the windows' ns/run is not skewed by a burst the way the overall mean is.
package bpfstats

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// Enable switches run-time statistics on until the benchmark ends
// (reference-counted, unlike the kernel.bpf_stats_enabled sysctl).
func Enable(b *testing.B) {
	b.Helper()
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		netlab.SkipOrFail(b, "BPF_ENABLE_STATS: %v", err)
	}
	b.Cleanup(func() { _ = c.Close() })
}

// Sampler records one program's statistics every 100 ms.
type Sampler struct {
	prog        *ebpf.Program
	windows     []float64 // ns/run of each window with runs
	first, last *ebpf.ProgramStats
	stop        chan struct{}
	done        sync.WaitGroup
}

// Result is what a program cost over the sampled load.
type Result struct {
	MedianNs, MeanNs      float64
	Runs, RecursionMisses uint64
}

// Start begins sampling prog.
func Start(b *testing.B, prog *ebpf.Program) *Sampler {
	b.Helper()
	st, err := prog.Stats()
	if err != nil {
		b.Fatalf("program stats: %v", err)
	}
	s := &Sampler{prog: prog, first: st, last: st, stop: make(chan struct{})}
	s.done.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.take()
			}
		}
	})
	return s
}

func (s *Sampler) take() {
	st, err := s.prog.Stats()
	if err != nil {
		return
	}
	if runs := st.RunCount - s.last.RunCount; runs > 0 {
		s.windows = append(s.windows, float64(st.Runtime-s.last.Runtime)/float64(runs))
	}
	s.last = st
}

// Stop ends sampling; ok is false if the program never ran.
func (s *Sampler) Stop() (r Result, ok bool) {
	close(s.stop)
	s.done.Wait()
	s.take()
	r.Runs = s.last.RunCount - s.first.RunCount
	r.RecursionMisses = s.last.RecursionMisses - s.first.RecursionMisses
	if r.Runs == 0 || len(s.windows) == 0 {
		return r, false
	}
	r.MedianNs = Median(s.windows)
	r.MeanNs = float64(s.last.Runtime-s.first.Runtime) / float64(r.Runs)
	return r, true
}

// Report stops s and reports its median and mean ns/run and its runs as
// metrics prefixed with name; a program the load did not reach is only
// logged.
func Report(b *testing.B, s *Sampler, name string) {
	b.Helper()
	r, ok := s.Stop()
	if !ok {
		b.Logf("%s: did not run under this load", name)
		return
	}
	b.ReportMetric(r.MedianNs, name+"-ns/run")
	b.ReportMetric(r.MeanNs, name+"-mean-ns/run")
	b.ReportMetric(float64(r.Runs), name+"-runs")
	b.Logf("%-40s median %5.0f ns/run, mean %5.0f ns/run, %8d runs, %d recursion misses",
		name, r.MedianNs, r.MeanNs, r.Runs, r.RecursionMisses)
}

// Median is the middle of v (the upper one of an even count); v is left
// as it was.
func Median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
