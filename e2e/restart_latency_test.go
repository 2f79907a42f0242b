package e2e

import (
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// overflowPort is where A listens with a full accept queue.
const overflowPort = 5099

// fullListener listens in A with a backlog of 1 and never accepts, so
// connections beyond the first two overflow its accept queue
// (TcpExtListenOverflows in A); connect makes n of them from B.
type fullListener struct {
	lab     *netlab.Lab
	fd      int
	clients []int
}

func listenFull(t *testing.T, lab *netlab.Lab) *fullListener {
	t.Helper()
	l := &fullListener{lab: lab, fd: -1}
	if err := lab.Do(lab.A, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		l.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: overflowPort, Addr: lab.IPA.As4()}); err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		return unix.Listen(fd, 1)
	}); err != nil {
		l.close()
		t.Fatalf("listener in A: %v", err)
	}
	return l
}

// connect starts n connections from B (non-blocking: they wait in
// SYN_SENT, retrying, while A's queue is full). It only reports errors: it
// runs beside the traffic.
func (l *fullListener) connect(t *testing.T, n int) {
	err := l.lab.Do(l.lab.B, func() error {
		for range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			l.clients = append(l.clients, fd)
			if err := unix.Connect(fd, &unix.SockaddrInet4{Port: overflowPort, Addr: l.lab.IPA.As4()}); err != nil && err != unix.EINPROGRESS {
				return fmt.Errorf("connect: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("connect to the full listener: %v", err)
	}
}

// close ends the listener (its pending connections with it), then the
// clients.
func (l *fullListener) close() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
	for _, fd := range l.clients {
		unix.Close(fd)
	}
	l.clients = nil
}

// A SIGKILL in the middle of a lossy bulk transfer, a restart 3 s later,
// then a SIGTERM: the stored latency/retransmits total equals A's own
// TcpRetransSegs delta over the whole test, and latency/listen_overflows
// (a /proc counter) its TcpExtListenOverflows delta, exactly. The
// retransmits are counted by the pinned retrans probe while no agent runs
// (the flow spans the kill; its socket storage is pinned with the counts),
// the overflows by the kernel, and the second agent continues both from
// what the first last reported: the first from the pinned maps, the second
// because it runs on the same boot and reads the same namespace
// (counted.json). Connects overflow A's accept queue only while no agent
// runs, so they are counted by no agent at all.
func TestAgentRestartLosesNoRetransmitOrOverflow(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	bin := buildAgent(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	state := t.TempDir()
	pins := filepath.Join(netlab.BPFFS(t), "nbs", "lab-a")
	args := []string{"--collector.address", col.grpcAddr, "--node.name", "lab-a", "--netns", lab.A, "--interval", interval.String(),
		"--snapshot.every", "1h", "--spool.dir", filepath.Join(state, "spool"), "--bpf.pin-dir", pins,
		"--node.credential-file", filepath.Join(state, "node-credential"), "--log.level", "info"}
	listener := listenFull(t, lab)
	t.Cleanup(listener.close)

	b0 := lab.Nstat(t, lab.A)
	first := startAgentProcess(t, "agent 1", bin, args...)
	waitNode(t, col, "lab-a")
	time.Sleep(2 * interval) // it has reported

	// The kill and restart go on beside the transfer, which runs on this
	// goroutine until every segment is acknowledged (2.5 s with the first
	// agent, 3 s with none, 2.5 s with the second). startAgentProcess fails
	// the test with Fatalf only if the binary cannot start, which then
	// ends this goroutine and leaves the test failed.
	var (
		wg              sync.WaitGroup
		second          *agentProcess
		atKill, atStart map[string]uint64
	)
	wg.Go(func() {
		time.Sleep(2500 * time.Millisecond)
		first.kill(t)
		atKill = lab.Nstat(t, lab.A)
		listener.connect(t, 20) // overflowing A's queue while no agent runs
		time.Sleep(3 * time.Second)
		atStart = lab.Nstat(t, lab.A)
		second = startAgentProcess(t, "agent 2", bin, args...)
	})
	res := lab.LossyBulk(t, 50, 8*time.Second)
	wg.Wait()
	if second == nil {
		t.Fatal("the second agent did not start")
	}
	// The pending connections go, and with them A's SYN-ACK retries: from
	// here A counts nothing more.
	listener.close()
	time.Sleep(interval)

	gap := func(k string) uint64 { return atStart[k] - atKill[k] }
	t.Logf("%d MB sent, %d segments dropped by the loss rule; while no agent ran: %d retransmits, %d listen overflows",
		res.Bytes>>20, res.Dropped, gap("TcpRetransSegs"), gap("TcpExtListenOverflows"))
	if gap("TcpRetransSegs") == 0 || gap("TcpExtListenOverflows") == 0 {
		t.Errorf("nothing counted while no agent ran: the test tests nothing")
	}
	exact := func(phase string, within time.Duration) {
		t.Helper()
		eventually(t, within, func() string {
			now := lab.Nstat(t, lab.A)
			for metric, counter := range map[string]string{
				catalog.LatencyRetransmits:     "TcpRetransSegs",
				catalog.Latency:                "TcpRetransSegs",
				catalog.LatencyListenOverflows: "TcpExtListenOverflows",
			} {
				if got, want := storedTotal(t, col, "lab-a", metric), float64(now[counter]-b0[counter]); got != want {
					return fmt.Sprintf("%s: stored %s %v, nstat %s delta %v", phase, metric, got, counter, want)
				}
			}
			return ""
		})
	}
	exact("after the SIGKILL and restart", withinTwoIntervals)
	second.signal(t, syscall.SIGTERM, 10*time.Second)
	exact("after the SIGTERM", time.Second)
	d := lab.Nstat(t, lab.A)
	t.Logf("over the test: %d retransmits, %d listen overflows, every one stored",
		d["TcpRetransSegs"]-b0["TcpRetransSegs"], d["TcpExtListenOverflows"]-b0["TcpExtListenOverflows"])
}
