package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The soak's margins: what the in-process collector (and this test's own
// gRPC clients) may still hold once every agent is gone, over what it held
// after a warm-up. The pgx pool keeps the connections the load opened, so
// descriptors get the pool's size as slack.
const (
	soakHonest         = 12
	soakRounds         = 6
	soakReportsPerRnd  = 15
	soakMisbehaving    = 24 // per round
	soakGoroutineSlack = 10
	soakFDSlack        = 12
	soakHeapSlack      = 16 << 20
)

type soakUsage struct {
	goroutines, fds int
	heap            uint64
}

func (u soakUsage) String() string {
	return fmt.Sprintf("%d goroutines, %d fds, %d KiB heap", u.goroutines, u.fds, u.heap>>10)
}

func measureSoak(t *testing.T) soakUsage {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count descriptors: %v", err)
	}
	return soakUsage{goroutines: runtime.NumGoroutine(), fds: len(ents), heap: ms.HeapAlloc}
}

// soakConn is one agent's own gRPC connection, closed when it is done, as a
// separate agent process would.
func soakConn(t *testing.T, addr string) (nbsv1.AgentServiceClient, func()) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Errorf("dial: %v", err)
		return nil, func() {}
	}
	return nbsv1.NewAgentServiceClient(conn), func() { conn.Close() }
}

// honestRound connects, sends n reports from seq on, and waits for each
// report's ack; it returns the next sequence.
func honestRound(ctx context.Context, addr, node string, seq uint64, n int) (uint64, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return seq, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := nbsv1.NewAgentServiceClient(conn).Connect(ctx)
	if err != nil {
		return seq, fmt.Errorf("connect: %w", err)
	}
	if err := s.Send(hello(node)); err != nil {
		return seq, fmt.Errorf("hello: %w", err)
	}
	for range n {
		if err := s.Send(report(seq, sample("tcp_reset", 1), sample("tcp_reset/sent", 1))); err != nil {
			return seq, fmt.Errorf("report %d: %w", seq, err)
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return seq, fmt.Errorf("report %d: waiting for its ack: %w", seq, err)
			}
			if rej := m.GetReject(); rej != nil {
				return seq, fmt.Errorf("report %d rejected: %s", seq, rej.GetReason())
			}
			if m.GetAck().GetSequence() == seq {
				break
			}
		}
		seq++
	}
	return seq, s.CloseSend()
}

// misbehave is one misbehaving agent of kind k; none of them may hurt the
// collector or the honest agents.
func misbehave(ctx context.Context, t *testing.T, addr string, k, i int) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if k == 0 { // raw garbage on the gRPC port
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 4096)
		for j := range b {
			b[j] = byte(rand.IntN(256))
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write(b)
		_, _ = c.Read(b)
		return
	}
	client, closeConn := soakConn(t, addr)
	defer closeConn()
	if client == nil {
		return
	}
	s, err := client.Connect(ctx)
	if err != nil {
		return
	}
	node := fmt.Sprintf("soak-bad-%d-%d", k, i)
	switch k {
	case 1: // a report without a Hello
		_ = s.Send(report(1, sample("tcp_reset", 1)))
		_, _ = s.Recv()
	case 2: // a Hello no agent could send
		h := hello("no spaces allowed")
		_ = s.Send(h)
		_, _ = s.Recv()
	case 3: // connects and says nothing, then goes away
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(500+rand.IntN(1500)) * time.Millisecond):
		}
	case 4: // disconnects mid-stream, reports unacked
		_ = s.Send(hello(node))
		for seq := uint64(1); seq <= 5; seq++ {
			_ = s.Send(report(seq, sample("tcp_reset", 1)))
		}
		cancel()
	case 5: // a slow reader: sends many reports and never reads an ack
		_ = s.Send(hello(node))
		for seq := uint64(1); seq <= 300; seq++ {
			if s.Send(report(seq, sample("tcp_reset", 1))) != nil {
				break
			}
		}
		time.Sleep(time.Second)
	}
}

// Many simulated agents over real gRPC, a third of them misbehaving, against
// an in-process collector: every honest report is stored exactly once, and
// once they are all gone the collector's goroutines, descriptors and heap
// are back within the margins above.
//
// Not t.Parallel: it counts the whole process's goroutines, descriptors and
// heap, so it runs before the package's parallel tests start (go test runs
// the sequential top-level tests first).
func TestSoakManyAgentsSomeMisbehaving(t *testing.T) {
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Warm-up: one honest agent and one of each misbehaviour, so pools and
	// caches the load fills are in the baseline.
	if _, err := honestRound(ctx, col.grpcAddr, "soak-warmup", 1, 3); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	for k := range 6 {
		misbehave(ctx, t, col.grpcAddr, k, -1)
	}
	time.Sleep(time.Second)
	base := measureSoak(t)
	t.Logf("after warm-up: %s", base)

	seqs := make([]uint64, soakHonest)
	for i := range seqs {
		seqs[i] = 1
	}
	start := time.Now()
	for round := range soakRounds {
		var wg sync.WaitGroup
		for i := range soakHonest {
			wg.Go(func() {
				next, err := honestRound(ctx, col.grpcAddr, fmt.Sprintf("soak-honest-%d", i), seqs[i], soakReportsPerRnd)
				if err != nil {
					t.Errorf("round %d: honest agent %d: %v", round, i, err)
				}
				seqs[i] = next
			})
		}
		for j := range soakMisbehaving {
			wg.Go(func() { misbehave(ctx, t, col.grpcAddr, j%6, round*soakMisbehaving+j) })
		}
		wg.Wait()
	}
	t.Logf("%d rounds of %d honest and %d misbehaving agents in %s", soakRounds, soakHonest, soakMisbehaving, time.Since(start).Round(time.Millisecond))

	var end soakUsage
	eventually(t, 15*time.Second, func() string {
		end = measureSoak(t)
		if end.goroutines > base.goroutines+soakGoroutineSlack || end.fds > base.fds+soakFDSlack || end.heap > base.heap+soakHeapSlack {
			return fmt.Sprintf("after the soak: %s; started from %s (slack %d goroutines, %d fds, %d KiB)",
				end, base, soakGoroutineSlack, soakFDSlack, soakHeapSlack>>10)
		}
		return ""
	})
	t.Logf("after the soak: %s", end)

	want := float64(soakRounds * soakReportsPerRnd)
	for i := range soakHonest {
		node := fmt.Sprintf("soak-honest-%d", i)
		for _, m := range []string{"tcp_reset", "tcp_reset/sent"} {
			if got := storedTotal(t, col, node, m); got != want {
				t.Errorf("%s %s: stored total %v, want %v (every report exactly once)", node, m, got, want)
			}
		}
	}
}
