package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nbs-project/nbs/bench/collectorproc"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// BenchmarkNodeMemory measures what the simulator holds per simulated node:
// a fleet of NBS_LOADGEN_MEM_NODES nodes (comma-separated; default
// 2000,8000), four nodes' streams a connection (NBS_LOADGEN_MEM_PER_CONN),
// 5% troubled, registers against the real nbs-collector binary (its own
// process, so its memory is not counted here) and a real PostgreSQL,
// reports for a minute (NBS_LOADGEN_MEM_HOLD), and then the simulator's Go
// heap in use, its goroutines' stacks and its resident memory are read
// (as it ran: the resident set's median over the hold; and after two
// collections), each less what the process held before the fleet
// started, per node.
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench NodeMemory -benchtime 1x -timeout 30m ./bench/loadgen/
//
// NBS_LOADGEN_MEM_PROFILE=dir writes a heap profile (inuse) and the
// goroutines by stack of each size into dir at the moment of measurement.
func BenchmarkNodeMemory(b *testing.B) {
	sizes := []int{2000, 8000}
	if v := os.Getenv("NBS_LOADGEN_MEM_NODES"); v != "" {
		sizes = sizes[:0]
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 50000 {
				b.Fatalf("NBS_LOADGEN_MEM_NODES=%q: want sizes within 1..50000", v)
			}
			sizes = append(sizes, n)
		}
	}
	hold := time.Minute
	if v := os.Getenv("NBS_LOADGEN_MEM_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			b.Fatalf("NBS_LOADGEN_MEM_HOLD=%q: want a duration of a second or more", v)
		}
		hold = d
	}
	perConn := 4
	if v := os.Getenv("NBS_LOADGEN_MEM_PER_CONN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			b.Fatalf("NBS_LOADGEN_MEM_PER_CONN=%q: want 1..10000", v)
		}
		perConn = n
	}
	// NBS_LOADGEN_MEM_GOGC sets this process's GOGC (the simulator's
	// alone: the collector's process does not inherit it).
	gcPercent := 100
	if v := os.Getenv("NBS_LOADGEN_MEM_GOGC"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("NBS_LOADGEN_MEM_GOGC=%q: want a percentage", v)
		}
		gcPercent = n
	}
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	bin := collectorproc.Build(b)
	for _, nodes := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for range b.N {
				nodeMemory(b, bin, nodes, perConn, gcPercent, hold)
			}
		})
	}
}

func nodeMemory(b *testing.B, bin string, nodes, perConn, gcPercent int, hold time.Duration) {
	grpcAddr := collectorproc.Start(b, bin, pgcluster.Database(b), nodes).GRPCAddr
	var ended firstBytes // why the first streams that ended did
	f, err := New(Config{Addr: grpcAddr, Nodes: nodes, NodesPerConn: perConn, Troubled: 0.05, Seed: 31,
		Log: slog.New(slog.NewTextHandler(&ended, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		b.Fatal(err)
	}
	heap0, stack0, rss0 := memNow(b)
	// Start the peak (VmHWM) from here, not from an earlier size's run.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatalf("reset the peak resident set: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Stats, 1)
	go func() { done <- f.Run(ctx, nil, 0) }()
	defer func() { cancel(); <-done }()
	// Registration: every node has had a report acknowledged.
	deadline := time.Now().Add(10 * time.Minute)
	for f.Stats().Registered < int64(nodes) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d nodes registered in 10 minutes", f.Stats().Registered, nodes)
		}
		time.Sleep(200 * time.Millisecond)
	}
	registered := f.Stats().AllRegistered
	cpu0 := cpuTime(b)
	// As it runs: the resident set once a second over the hold, its
	// median (not after forced collections: the heap's garbage until the
	// next collection, GOGC, on top of what is live), as bench/fleet
	// measures the simulator beside the collector.
	var samples []uint64
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(time.Second) {
		samples = append(samples, procStatus(b, "VmRSS"))
	}
	slices.Sort(samples)
	running := samples[len(samples)/2]
	// The simulator's CPU over the hold, collections included: what a
	// smaller heap goal (GOGC) would cost.
	cpuPer := float64((cpuTime(b) - cpu0).Microseconds()) / hold.Seconds() / float64(nodes)
	heap1, stack1, rss1 := memNow(b)
	if dir := os.Getenv("NBS_LOADGEN_MEM_PROFILE"); dir != "" {
		w, err := os.Create(filepath.Join(dir, fmt.Sprintf("loadgen-heap-%d.pprof", nodes)))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(w, 0); err != nil {
			b.Fatal(err)
		}
		w.Close()
		// The goroutines by stack, as text: what each node holds.
		w, err = os.Create(filepath.Join(dir, fmt.Sprintf("loadgen-goroutine-%d.txt", nodes)))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("goroutine").WriteTo(w, 1); err != nil {
			b.Fatal(err)
		}
		w.Close()
	}
	s := f.Stats()
	// An unhealthy fleet's figures are logged (the memory of streams
	// ending and reconnecting), then the run fails.
	defer func() {
		if s.Errors != 0 || s.Rejected != 0 || s.Acked == 0 {
			b.Fatalf("the fleet was not healthy while measured: %v; the first streams that ended:\n%s", s, ended.String())
		}
	}()
	heapPer := (float64(heap1) - float64(heap0)) / float64(nodes)
	stackPer := (float64(stack1) - float64(stack0)) / float64(nodes)
	rssPer := (float64(rss1) - float64(rss0)) / float64(nodes)
	runningPer := (float64(running) - float64(rss0)) / float64(nodes)
	// The most the process held at once, registering included (the
	// benchmark binary holds nothing else of size).
	peakPer := (float64(procStatus(b, "VmHWM")) - float64(rss0)) / float64(nodes)
	b.ReportMetric(heapPer, "heap-B/node")
	b.ReportMetric(stackPer, "stack-B/node")
	b.ReportMetric(rssPer, "rss-B/node")
	b.ReportMetric(runningPer, "running-rss-B/node")
	b.ReportMetric(peakPer, "peak-rss-B/node")
	b.ReportMetric(cpuPer, "cpu-µs/node-s")
	b.ReportMetric(float64(runtime.NumGoroutine())/float64(nodes), "goroutines/node")
	// A new goroutine's stack is the average in use at the last
	// collection (the runtime's adaptive start), not 2 KiB.
	start := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(start)
	b.Logf("%d nodes, %d a connection: registered in %v, then %v: heap in use %.1f KiB a node, stacks %.1f KiB (%.2f goroutines a node, a new one's stack %d B), RSS %.1f KiB (%d MiB in all; %.1f KiB as it ran, the median over the hold), peak RSS %.1f KiB a node; CPU %.1f µs a node a second (GOGC %d); %v",
		nodes, perConn, registered.Round(time.Second), hold, heapPer/1024, stackPer/1024, float64(runtime.NumGoroutine())/float64(nodes), start[0].Value.Uint64(),
		rssPer/1024, rss1>>20, runningPer/1024, peakPer/1024, cpuPer, gcPercent, s)
}

// memNow is the Go heap in use and the goroutines' stacks, and the
// resident set, after two collections (what sync.Pools keep survives one)
// with free memory returned to the system.
func memNow(b *testing.B) (heap, stack, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse, procStatus(b, "VmRSS")
}

// firstBytes keeps the first 4 KiB written to it.
type firstBytes struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *firstBytes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := 4096 - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (w *firstBytes) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus is a size in /proc/self/status (VmRSS, VmHWM), in bytes.
func procStatus(b *testing.B, field string) uint64 {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(st))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("%s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
