package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

const testTable = "test_leader"

func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgcluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `
		CREATE TABLE test_leader (id integer PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL, holder text NOT NULL,
			since timestamptz NOT NULL, heartbeat timestamptz NOT NULL);
		INSERT INTO test_leader VALUES (1, 0, '', now(), now())`); err != nil {
		t.Fatal(err)
	}
	return pool
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// contender runs one Elector and records its terms.
type contender struct {
	name string
	e    *Elector
	stop func()

	mu       sync.Mutex
	terms    []Term
	lost     []error // why each finished term's lead context ended
	notified []string
}

func startContender(t *testing.T, pool *pgxpool.Pool, name string, retry time.Duration) *contender {
	t.Helper()
	c := &contender{name: name}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("contender", name)
	c.e = New(pool, Config{Name: "test " + name, LockID: 42, Table: testTable, Holder: name,
		Retry: retry, Ping: 100 * time.Millisecond, Listen: []string{"test_wake"}}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.e.Run(ctx, func(ctx context.Context, term Term) error {
			c.mu.Lock()
			c.terms = append(c.terms, term)
			c.mu.Unlock()
			<-ctx.Done()
			c.mu.Lock()
			c.lost = append(c.lost, context.Cause(ctx))
			c.mu.Unlock()
			return nil
		}, func(n *pgconn.Notification) {
			c.mu.Lock()
			c.notified = append(c.notified, n.Payload)
			c.mu.Unlock()
		})
	}()
	var once sync.Once
	c.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(c.stop)
	return c
}

func (c *contender) snapshot() (terms []Term, lost int, notified []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Term(nil), c.terms...), len(c.lost), append([]string(nil), c.notified...)
}

func waitFor(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after %s: %s", timeout, last)
}

// leaderOf waits until exactly one contender leads and returns it.
func leaderOf(t *testing.T, cs ...*contender) *contender {
	t.Helper()
	var leader *contender
	waitFor(t, 5*time.Second, func() string {
		var leading []string
		leader = nil
		for _, c := range cs {
			if c.e.Leading() {
				leading = append(leading, c.name)
				leader = c
			}
		}
		if len(leading) != 1 {
			return fmt.Sprintf("leading: %v, want exactly one", leading)
		}
		return ""
	})
	return leader
}

// Two contenders: one wins, the other stays a follower; when the winner's
// connection dies the follower takes over with a higher epoch, the old
// term's context ends, and the old term's fenced writes are refused.
func TestElectionFailover(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	// The first reconnects slower than the second polls the lock, so the
	// second is the one to take over when the first's session dies.
	first := startContender(t, pool, "a", 300*time.Millisecond)
	leaderOf(t, first)
	second := startContender(t, pool, "b", 50*time.Millisecond)
	a, b := first, second
	time.Sleep(300 * time.Millisecond) // several follower retries and leader pings
	if second.e.Leading() || !first.e.Leading() {
		t.Fatalf("the lead moved without a cause: first %v, second %v", first.e.Leading(), second.e.Leading())
	}
	terms, _, _ := first.snapshot()
	if len(terms) != 1 || terms[0].Epoch != 1 {
		t.Fatalf("first leader's terms %+v, want one with epoch 1", terms)
	}
	if st, err := ReadStatus(ctx, pool, testTable); err != nil || st.Holder != first.name || st.Epoch != 1 {
		t.Fatalf("status %+v, %v; want holder %s at epoch 1", st, err, first.name)
	}
	old := terms[0]

	// Notifications on the listened channel reach the leader only.
	if _, err := pool.Exec(ctx, `SELECT pg_notify('test_wake', 'hello')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, func() string {
		if _, _, n := first.snapshot(); len(n) != 1 || n[0] != "hello" {
			return fmt.Sprintf("leader heard %v", n)
		}
		return ""
	})

	// Kill the leader's session, as a dead host or a network cut would.
	var killed bool
	if err := pool.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
		"nbs-collector test "+first.name).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the leader's session: %v %v", killed, err)
	}
	waitFor(t, 5*time.Second, func() string {
		if terms, _, _ := second.snapshot(); len(terms) != 1 {
			return fmt.Sprintf("second contender's terms %+v, want it to take over", terms)
		}
		return ""
	})
	if _, lost, _ := first.snapshot(); lost != 1 {
		t.Errorf("the deposed leader's lead context ended %d times, want 1", lost)
	}
	newTerms, _, _ := second.snapshot()
	if newTerms[0].Epoch <= old.Epoch {
		t.Errorf("new epoch %d, want above %d", newTerms[0].Epoch, old.Epoch)
	}
	// A write fenced by the old term is refused; the new term's is not.
	for _, c := range []struct {
		term Term
		want error
	}{{old, ErrFenced}, {newTerms[0], nil}} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return c.term.Fence(ctx, tx) })
		if !errors.Is(err, c.want) {
			t.Errorf("Fence(epoch %d) = %v, want %v", c.term.Epoch, err, c.want)
		}
	}
	// The deposed one reconnects as a follower: the lead stays put.
	time.Sleep(300 * time.Millisecond)
	if got := leaderOf(t, a, b); got != second {
		t.Errorf("%s leads after the failover, want %s", got.name, second.name)
	}

	// A clean stop frees the lock at once; epochs keep increasing.
	second.stop()
	waitFor(t, 5*time.Second, func() string {
		if terms, _, _ := first.snapshot(); len(terms) != 2 {
			return fmt.Sprintf("first contender's terms %+v, want a second term", terms)
		}
		return ""
	})
	terms, _, _ = first.snapshot()
	if terms[1].Epoch <= newTerms[0].Epoch {
		t.Errorf("third epoch %d, want above %d", terms[1].Epoch, newTerms[0].Epoch)
	}
	if st, err := ReadStatus(ctx, pool, testTable); err != nil || st.Holder != first.name || st.Epoch != terms[1].Epoch {
		t.Errorf("status %+v, %v; want holder %s at epoch %d", st, err, first.name, terms[1].Epoch)
	}
}

// A leader whose epoch was taken from under it (its lock survived, say,
// a manual change of the term record) steps down at its next heartbeat.
func TestElectionStepsDownWhenFenced(t *testing.T) {
	pool := testPool(t)
	a := startContender(t, pool, "a", 50*time.Millisecond)
	leaderOf(t, a)
	if _, err := pool.Exec(t.Context(), `UPDATE test_leader SET epoch = epoch + 1`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() string {
		if _, lost, _ := a.snapshot(); lost != 1 {
			return "the fenced leader did not step down"
		}
		return ""
	})
	// It campaigns again, wins the free lock and takes a newer epoch.
	waitFor(t, 5*time.Second, func() string {
		if terms, _, _ := a.snapshot(); len(terms) != 2 || terms[1].Epoch != 3 {
			return fmt.Sprintf("terms %+v, want a second one at epoch 3", terms)
		}
		return ""
	})
}

// A Session reconnects after its connection is killed, and its work sees
// a new connection each time.
func TestSessionReconnects(t *testing.T) {
	pool := testPool(t)
	ctx, cancel := context.WithCancel(t.Context())
	pids := make(chan uint32, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Session{Pool: pool, Name: "test session", Retry: 20 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}.Run(ctx,
			func(ctx context.Context, conn *pgx.Conn) error {
				pids <- conn.PgConn().PID()
				_, err := conn.Exec(ctx, `SELECT pg_sleep(60)`)
				return err
			})
	}()
	defer func() { cancel(); <-done }()
	seen := map[uint32]bool{}
	for range 3 {
		var pid uint32
		select {
		case pid = <-pids:
		case <-time.After(5 * time.Second):
			t.Fatalf("no (re)connection after %d", len(seen))
		}
		if seen[pid] {
			t.Fatalf("backend %d reused", pid)
		}
		seen[pid] = true
		var app string
		if err := pool.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&app); err != nil || app != "test session" {
			t.Fatalf("session %d: application_name %q, %v", pid, app, err)
		}
		if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
	}
}
