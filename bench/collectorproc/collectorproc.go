// Package collectorproc runs the real nbs-collector binary as a process of
// its own for the benchmarks that measure it (or measure beside it) from
// outside: its memory, its CPU and its /metrics are its own, not the
// benchmark's.
package collectorproc

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Process is a running collector and the addresses it listens on.
type Process struct {
	Cmd      *exec.Cmd
	GRPCAddr string
	HTTPAddr string
}

// Build builds nbs-collector into the benchmark's temporary directory.
func Build(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "nbs-collector")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nbs-project/nbs/collector/cmd/nbs-collector").CombinedOutput()
	if err != nil {
		tb.Fatalf("build nbs-collector: %v\n%s", err, out)
	}
	return bin
}

// Start runs bin on dbURL, sized for nodes simulated agents from one
// address (streams, streams per address and nodes raised to nodes+100;
// the connection bounds follow the streams), with extra flags, until the
// benchmark ends, and returns once it listens.
func Start(tb testing.TB, bin, dbURL string, nodes int, extra ...string) *Process {
	tb.Helper()
	p := &Process{GRPCAddr: FreeAddr(tb), HTTPAddr: FreeAddr(tb)}
	streams := strconv.Itoa(nodes + 100)
	p.Cmd = exec.Command(bin, append([]string{"--db.url", dbURL, "--grpc.listen-address", p.GRPCAddr, "--http.listen-address", p.HTTPAddr,
		"--grpc.node-auth", "none", "--ingest.max-streams", streams, "--ingest.max-streams-per-address", streams,
		"--ingest.max-nodes", streams}, extra...)...)
	logf, err := os.Create(filepath.Join(tb.TempDir(), "collector.log"))
	if err != nil {
		tb.Fatal(err)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		tb.Fatalf("start collector: %v", err)
	}
	tb.Cleanup(func() {
		p.Stop()
		logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", p.HTTPAddr)
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			tb.Fatalf("collector not listening within 30s (log: %s)", logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop interrupts the collector (it finishes its fold and closes cleanly)
// and waits for it; a second Stop does nothing more.
func (p *Process) Stop() {
	if p.Cmd.ProcessState != nil {
		return
	}
	_ = p.Cmd.Process.Signal(os.Interrupt)
	_ = p.Cmd.Wait()
}

// FreeAddr is a loopback address with a port free at the time of asking.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
