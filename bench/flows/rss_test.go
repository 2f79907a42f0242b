package flows

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/source"
	flowsrc "github.com/nbs-project/nbs/agent/source/flows"
	"github.com/nbs-project/nbs/bench/flows/peer"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// childEnv names what a child process of BenchmarkAgentRSS runs: "nbs" or
// "netobserv" (a side's user space), or "holder" (connections of the lab).
const childEnv = "NBS_FLOWSRSS_CHILD"

// TestMain runs the children of BenchmarkAgentRSS: each side's user space
// in a process of its own, so its resident memory is its own.
func TestMain(m *testing.M) {
	switch side := os.Getenv(childEnv); side {
	case "":
		os.Exit(m.Run())
	case "holder":
		if err := runHolder(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "holder: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "nbs", "netobserv":
		if err := runChild(side, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "%s child: %v\n", side, err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want nbs or netobserv\n", childEnv, side)
		os.Exit(2)
	}
}

// childStats is what a child prints when its stdin ends.
type childStats struct {
	// LoadRSSKiB is the resident memory once loaded, before any
	// connection (VmRSS); LoadPeakKiB the peak of loading (VmHWM).
	LoadRSSKiB, LoadPeakKiB int
	// PeakKiB is the peak resident memory over the intervals (VmHWM,
	// reset after loading), EndKiB the resident memory at the end.
	PeakKiB, EndKiB int
	// PeakHeap is the largest Go heap in use (HeapInuse) at an interval's
	// end; AllocPerInterval the bytes allocated per interval after the
	// first, on average.
	PeakHeap, AllocPerInterval uint64
	// MapBytes is what the kernel charges for the process's BPF maps
	// (memlock in fdinfo, as bpftool shows it), each map once.
	MapBytes uint64
	// Opened is the connections opened over all intervals' reports (nbs),
	// Records the flows of each eviction (netobserv).
	Opened  uint64
	Records []int
}

// runChild loads its side, says "ready", runs one interval per line read
// ("ok" each), and at the end of its input prints its childStats.
func runChild(side string, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	var tick func() error
	var st childStats
	switch side {
	case "nbs":
		// As the agent runs it (agent/app): every namespace, the default
		// top-K, and the running agent's GC setting; every report carries
		// the edges (--flows.every=0), the most work an interval can have.
		debug.SetGCPercent(50)
		self, err := netns.Resolve("")
		if err != nil {
			return err
		}
		src, err := flowsrc.Open(ctx, flowsrc.Options{Env: source.Env{Netns: self, AllNetns: true,
			Logger: slog.New(slog.DiscardHandler)}})
		if err != nil {
			return err
		}
		defer src.Close()
		for _, c := range src.Capabilities() {
			if !c.Available || c.Reason != "" {
				return fmt.Errorf("capability %s: available %v: %s", c.Name, c.Available, c.Reason)
			}
		}
		tick = func() error {
			r, err := src.Collect(ctx)
			if err != nil {
				return err
			}
			for _, e := range r.Flows {
				st.Opened += e.GetOpened()
			}
			return nil
		}
	case "netobserv":
		n, err := strconv.ParseUint(os.Getenv("NBS_FLOWSRSS_PEERMAP"), 10, 32)
		if err != nil {
			return fmt.Errorf("NBS_FLOWSRSS_PEERMAP: %w", err)
		}
		pe, err := peer.LoadSized(uint32(n))
		if err != nil {
			return err
		}
		defer pe.Close()
		ifi, err := net.InterfaceByName("vA")
		if err != nil {
			return err
		}
		if err := pe.Attach(ifi.Index); err != nil {
			return err
		}
		ip := net.ParseIP(os.Getenv("NBS_FLOWSRSS_AGENTIP"))
		tick = func() error {
			recs, err := pe.Evict(ifi.Name, ip)
			if err != nil {
				return err
			}
			st.Records = append(st.Records, len(recs))
			return nil
		}
	}
	var err error
	if st.LoadRSSKiB, err = statusKiB("self", "VmRSS"); err != nil {
		return err
	}
	if st.LoadPeakKiB, err = statusKiB("self", "VmHWM"); err != nil {
		return err
	}
	// From here the peak is the intervals' (proc(5): clear_refs 5).
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return fmt.Errorf("reset the peak RSS: %w", err)
	}
	if st.MapBytes, err = mapMemlock(os.Getpid()); err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	var ms runtime.MemStats
	var alloc0 uint64
	n := 0
	for sc.Scan() {
		if err := tick(); err != nil {
			return err
		}
		runtime.ReadMemStats(&ms)
		st.PeakHeap = max(st.PeakHeap, ms.HeapInuse)
		if n == 0 {
			alloc0 = ms.TotalAlloc
		}
		n++
		fmt.Fprintln(out, "ok")
	}
	if n > 1 {
		st.AllocPerInterval = (ms.TotalAlloc - alloc0) / uint64(n-1)
	}
	if dir := os.Getenv("NBS_FLOWSRSS_PROFILE"); dir != "" {
		// Where the intervals allocate: go tool pprof -sample_index=alloc_space.
		f, err := os.Create(filepath.Join(dir, side+".allocs"))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return err
		}
	}
	if st.PeakKiB, err = statusKiB("self", "VmHWM"); err != nil {
		return err
	}
	if st.EndKiB, err = statusKiB("self", "VmRSS"); err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(st)
}

// statusKiB reads a field of /proc/<pid>/status in KiB.
func statusKiB(pid, field string) (int, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%s/status", field, pid)
}

// mapMemlock sums what the kernel charges for each BPF map a process
// holds (bpf_map_info's memlock, in fdinfo), each map once.
func mapMemlock(pid int) (uint64, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	var total uint64
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since
		}
		var id string
		var memlock uint64
		for line := range strings.SplitSeq(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "map_id:"); ok {
				id = strings.TrimSpace(v)
			} else if v, ok := strings.CutPrefix(line, "memlock:"); ok {
				memlock, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
		if id != "" && !seen[id] {
			seen[id] = true
			total += memlock
		}
	}
	return total, nil
}

// child is a running child process of BenchmarkAgentRSS.
type child struct {
	side string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
}

func startChild(b *testing.B, side string, env []string, wrap ...string) *child {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	args := append(wrap, exe)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), append(env, childEnv+"="+side)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &child{side: side, cmd: cmd, in: in, out: bufio.NewReader(out)}
	b.Cleanup(func() {
		c.in.Close()
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	c.expect(b, "ready")
	return c
}

func (c *child) expect(b *testing.B, want string) {
	b.Helper()
	line, err := c.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != want {
		b.Fatalf("%s child: read %q, %v; want %q", c.side, line, err, want)
	}
}

func (c *child) tick(b *testing.B) {
	b.Helper()
	if _, err := io.WriteString(c.in, "tick\n"); err != nil {
		b.Fatalf("%s child: %v", c.side, err)
	}
	c.expect(b, "ok")
}

// stop ends a holder: its connections close.
func (c *child) stop(b *testing.B) {
	b.Helper()
	c.in.Close()
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("%s child: %v", c.side, err)
	}
}

func (c *child) finish(b *testing.B) childStats {
	b.Helper()
	c.in.Close()
	var st childStats
	if err := json.NewDecoder(c.out).Decode(&st); err != nil {
		b.Fatalf("%s child: read its figures: %v", c.side, err)
	}
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("%s child: %v", c.side, err)
	}
	return st
}

// BenchmarkAgentRSS: the user space of both designs at NBS_FLOWSRSS_CONNS
// (default 100,000) concurrent TCP connections, each in a process of its
// own beside the other in the same run: the flows source as the agent runs
// it (agent/source/flows: the probe, its interval's end, the top-K) and the
// NetObserv-shaped peer's eviction (peer.Evict: iterate, delete, join the
// CPUs, one record per flow) over its per-CPU map sized for the flows it
// sees (two a connection at vA: data one way, ACKs the other). The lab's
// connections go from A to 64 addresses of B, through the veth pair the
// peer watches, held by processes of 9,000 each (runHolder; two ports of
// their own each: 128 server edges and 128 client edges a process); every
// connection sends a byte each interval, so both designs have every flow
// active. Reported: each process's resident
// memory once loaded, its peak over NBS_FLOWSRSS_INTERVALS (default 5)
// intervals, its Go heap and allocations per interval (with
// NBS_FLOWSRSS_PROFILE=<dir>, each side's allocation profile there), and the kernel
// memory of both (the maps' memlock, and ours adds its socket storage,
// both ends of each connection, at the kernel's struct sizes as in
// BenchmarkMapMemory).
//
//	NBS_REQUIRE_BPF=1 go test -run '^$' -bench AgentRSS -benchtime 1x ./bench/flows/
func BenchmarkAgentRSS(b *testing.B) {
	conns := envInt("NBS_FLOWSRSS_CONNS", 100000)
	intervals := envInt("NBS_FLOWSRSS_INTERVALS", 5)
	lab := netlab.New(b)
	const addrs = 64
	var dsts []string
	base := lab.IPB.As4()
	for i := range addrs {
		a := base
		a[3] = byte(10 + i)
		addr := netip.AddrFrom4(a)
		if out, err := exec.Command("ip", "-n", lab.B, "addr", "add", addr.String()+"/24", "dev", "vB").CombinedOutput(); err != nil {
			b.Fatalf("ip addr add %s: %v: %s", addr, err, out)
		}
		dsts = append(dsts, addr.String())
	}
	for b.Loop() {
		b.Logf("load average at the start: %s", loadavg())
		ours := startChild(b, "nbs", nil)
		theirs := startChild(b, "netobserv", []string{"NBS_FLOWSRSS_PEERMAP=" + strconv.Itoa(2*conns+1024),
			"NBS_FLOWSRSS_AGENTIP=" + lab.IPA.String()}, "ip", "netns", "exec", lab.A)
		// The connections are held by processes of a few thousand each:
		// raising RLIMIT_NOFILE's hard limit takes CAP_SYS_RESOURCE.
		t0 := time.Now()
		var holders []*child
		var hwg sync.WaitGroup
		var hmu sync.Mutex
		for h := 0; h*perHolder < conns; h++ {
			env := []string{"NBS_FLOWSRSS_A=" + lab.A, "NBS_FLOWSRSS_B=" + lab.B,
				"NBS_FLOWSRSS_N=" + strconv.Itoa(min(perHolder, conns-h*perHolder)),
				"NBS_FLOWSRSS_PORTS=" + fmt.Sprintf("%d,%d", 20000+2*h, 20001+2*h),
				"NBS_FLOWSRSS_ADDRS=" + strings.Join(dsts, ",")}
			hwg.Go(func() {
				c := startChild(b, "holder", env)
				hmu.Lock()
				holders = append(holders, c)
				hmu.Unlock()
			})
		}
		hwg.Wait()
		b.Logf("%d connections open in %v (%d processes)", conns, time.Since(t0).Round(time.Millisecond), len(holders))
		kids := []*child{ours, theirs}
		start := time.Now()
		for range intervals {
			// A byte on every connection, then both sides' interval.
			var wg sync.WaitGroup
			for _, h := range holders {
				wg.Go(func() { h.tick(b) })
			}
			wg.Wait()
			time.Sleep(200 * time.Millisecond) // the ACKs
			for _, k := range kids {
				wg.Go(func() { k.tick(b) })
			}
			wg.Wait()
		}
		elapsed := time.Since(start)
		o, t := ours.finish(b), theirs.finish(b)
		for _, h := range holders {
			h.stop(b)
		}
		// Both ends' state changes count: the lab's connections were
		// opened twice over (client and server edges), beside whatever
		// else the machine opened meanwhile.
		if o.Opened < uint64(2*conns) {
			b.Errorf("nbs reported %d connections opened, want at least %d", o.Opened, 2*conns)
		}
		if last := t.Records[len(t.Records)-1]; last < conns {
			b.Errorf("netobserv evicted %d flows in the last interval, want at least %d", last, conns)
		}
		ourKernel := o.MapBytes + uint64(2*conns)*socketStorageBytes(b)
		mib := func(kib int) float64 { return float64(kib) / 1024 }
		b.ReportMetric(mib(o.PeakKiB), "nbs-peak-RSS-MiB")
		b.ReportMetric(float64(o.PeakHeap)/(1<<20), "nbs-heap-MiB")
		b.ReportMetric(float64(o.AllocPerInterval)/(1<<20), "nbs-alloc-MiB/interval")
		b.ReportMetric(float64(ourKernel)/(1<<20), "nbs-kernel-MiB")
		b.ReportMetric(mib(t.PeakKiB), "netobserv-peak-RSS-MiB")
		b.ReportMetric(float64(t.PeakHeap)/(1<<20), "netobserv-heap-MiB")
		b.ReportMetric(float64(t.AllocPerInterval)/(1<<20), "netobserv-alloc-MiB/interval")
		b.ReportMetric(float64(t.MapBytes)/(1<<20), "netobserv-kernel-MiB")
		for _, x := range []struct {
			side string
			st   childStats
		}{{"nbs", o}, {"netobserv", t}} {
			b.Logf("%s at %d connections, %d intervals (%v): loaded %.1f MiB RSS (load peak %.1f), peak over the intervals %.1f MiB, end %.1f MiB; Go heap in use ≤ %.1f MiB, %.2f MiB allocated an interval; BPF maps %.1f MiB (memlock)",
				x.side, conns, intervals, elapsed.Round(time.Millisecond), mib(x.st.LoadRSSKiB), mib(x.st.LoadPeakKiB), mib(x.st.PeakKiB), mib(x.st.EndKiB),
				float64(x.st.PeakHeap)/(1<<20), float64(x.st.AllocPerInterval)/(1<<20), float64(x.st.MapBytes)/(1<<20))
		}
		b.Logf("kernel: nbs %.1f MiB (maps %.1f + socket storage %d B × %d sockets), netobserv %.1f MiB (%d CPUs); netobserv's evictions: %v flows; load average at the end: %s",
			float64(ourKernel)/(1<<20), float64(o.MapBytes)/(1<<20), socketStorageBytes(b), 2*conns, float64(t.MapBytes)/(1<<20), runtime.NumCPU(), t.Records, loadavg())
	}
}

// perHolder is how many connections a holder process opens: both ends'
// descriptors within the usual RLIMIT_NOFILE of 20,000.
const perHolder = 9000

// runHolder opens NBS_FLOWSRSS_N connections from namespace
// NBS_FLOWSRSS_A to the addresses NBS_FLOWSRSS_ADDRS and ports
// NBS_FLOWSRSS_PORTS in NBS_FLOWSRSS_B, in turn, holding both ends (raw
// sockets: little memory beyond the descriptors); says "ready", writes a
// byte on each client socket per line read ("ok" each), and closes all at
// the end of its input.
func runHolder(in io.Reader, out io.Writer) error {
	n, err := strconv.Atoi(os.Getenv("NBS_FLOWSRSS_N"))
	if err != nil {
		return fmt.Errorf("NBS_FLOWSRSS_N: %w", err)
	}
	nsA, err := netns.Resolve(os.Getenv("NBS_FLOWSRSS_A"))
	if err != nil {
		return err
	}
	nsB, err := netns.Resolve(os.Getenv("NBS_FLOWSRSS_B"))
	if err != nil {
		return err
	}
	var dsts []unix.SockaddrInet4
	for p := range strings.SplitSeq(os.Getenv("NBS_FLOWSRSS_PORTS"), ",") {
		port, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("NBS_FLOWSRSS_PORTS: %w", err)
		}
		for a := range strings.SplitSeq(os.Getenv("NBS_FLOWSRSS_ADDRS"), ",") {
			addr, err := netip.ParseAddr(a)
			if err != nil {
				return fmt.Errorf("NBS_FLOWSRSS_ADDRS: %w", err)
			}
			dsts = append(dsts, unix.SockaddrInet4{Addr: addr.As4(), Port: port})
		}
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur < uint64(2*n+100) {
		return fmt.Errorf("RLIMIT_NOFILE %d is too low for %d connections", lim.Cur, n)
	}
	var fds []int // every descriptor, closed at the end
	defer func() { closeAll(fds) }()
	var listeners []int
	seen := map[int]bool{}
	for _, d := range dsts {
		if seen[d.Port] {
			continue
		}
		seen[d.Port] = true
		var fd int
		if err := nsB.Do(func() (err error) {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrInet4{Port: d.Port}); err != nil {
				unix.Close(fd)
				return err
			}
			return unix.Listen(fd, 4096)
		}); err != nil {
			return fmt.Errorf("listen on %d: %w", d.Port, err)
		}
		listeners = append(listeners, fd)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var accepted atomic.Int64
	var servers []int
	for _, fd := range listeners {
		wg.Go(func() {
			for {
				c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
				if err == unix.EINTR || err == unix.ECONNABORTED {
					continue
				}
				if err != nil {
					return // shut down
				}
				mu.Lock()
				servers = append(servers, c)
				mu.Unlock()
				accepted.Add(1)
			}
		})
	}
	stopAccepting := func() {
		for _, fd := range listeners {
			_ = unix.Shutdown(fd, unix.SHUT_RD) // wakes the accept
			unix.Close(fd)
		}
		wg.Wait()
		fds = append(fds, servers...)
	}
	clients := make([]int, 0, n)
	err = nsA.Do(func() error {
		for i := range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("socket %d: %w", i, err)
			}
			clients = append(clients, fd)
			if err := unix.Connect(fd, &dsts[i%len(dsts)]); err != nil {
				return fmt.Errorf("connect %d: %w", i, err)
			}
		}
		return nil
	})
	fds = append(fds, clients...)
	if err != nil {
		stopAccepting()
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for accepted.Load() < int64(n) {
		if time.Now().After(deadline) {
			stopAccepting()
			return fmt.Errorf("%d of %d connections accepted", accepted.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopAccepting()
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	one := []byte{1}
	for sc.Scan() {
		for _, fd := range clients {
			if _, err := unix.Write(fd, one); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		fmt.Fprintln(out, "ok")
	}
	return nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
