package main

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/procstatus"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// peakBound is the agent's memory goal (BENCHMARKS.md, "The agent: what it
// costs the node"). The agent peaks near 26 MiB; it peaked at 42–52 MiB
// when naming drop sites read /proc/kallsyms whole.
const peakBound = 32 << 10 // KiB

// TestPeakMemory runs the real binary through its start (loading every
// program, reading kernel BTF) and a dozen collections with drop and reset
// evidence to name, and bounds its peak resident memory (VmHWM). No
// collector listens: the uplink keeps redialling, as on a node that cannot
// reach one.
func TestPeakMemory(t *testing.T) {
	lab := netlab.New(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "nbs-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--collector.address", "127.0.0.1:9", "--node.name", "peak-1", "--interval", "200ms",
		"--spool.dir", filepath.Join(dir, "spool"), "--node.credential-file", filepath.Join(dir, "credential"), "--bpf.pin-dir", "none")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	log := waitLog(t, logPath, "agent running", 30*time.Second)
	if !strings.Contains(log, "drops probe counting") || !strings.Contains(log, "tcp_reset probe counting") {
		netlab.SkipOrFail(t, "the agent runs without its drop and reset probes:\n%s", log)
	}
	// Evidence to name in the next collections: UDP to a closed port in B
	// (no_socket drops) and connections refused there (resets).
	lab.SendUDP(t, lab.A, netip.AddrPortFrom(lab.IPB, 9), 200, 100, time.Millisecond)
	lab.ResetNoSocket(t, 20)
	time.Sleep(2 * time.Second)
	if cmd.ProcessState != nil {
		t.Fatalf("agent exited:\n%s", readLog(t, logPath))
	}
	peak, err := procstatus.KiB(cmd.Process.Pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peak resident memory %d KiB", peak)
	if peak > peakBound {
		t.Errorf("agent's peak resident memory %d KiB, want at most %d KiB", peak, peakBound)
	}
}

func readLog(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitLog returns the log once it holds line.
func waitLog(t *testing.T, path, line string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		log := readLog(t, path)
		if strings.Contains(log, line) {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the agent's log within %s:\n%s", line, within, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
