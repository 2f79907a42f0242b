package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestDatabaseDown(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a connect error", fmt.Errorf("list nodes: %w", &pgconn.ConnectError{}), true},
		{"connection refused", fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"a connection closed mid-answer", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), true},
		{"a closed connection", pgconn.ErrConnClosed, true},
		{"server shutting down", pg("57P01"), true},
		{"server crashed", pg("57P02"), true},
		{"server starting up", pg("57P03"), true},
		{"no connection slot", pg("53300"), true},
		{"connection exception", pg("08006"), true},
		{"a statement timeout is about the statement", pg("57014"), false},
		{"a unique violation is about the data", pg("23505"), false},
		{"the caller left", fmt.Errorf("query: %w", context.Canceled), false},
		{"the caller's own deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{"the caller's own deadline, judged unreachable", fmt.Errorf("look up token: %w: %w", ErrUnreachable, context.DeadlineExceeded), true},
		{"a bug", errors.New("nil map"), false},
		{"not found", fmt.Errorf("node: %w", ErrNotFound), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DatabaseDown(c.err); got != c.want {
				t.Errorf("DatabaseDown(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

// What pgx really returns for a database that is not there is told
// apart: a closed port, and a pool whose server has gone.
func TestDatabaseDownFromPgx(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	pool, err := pgxpool.New(ctx, "postgres://nbs@"+closed+"/nbs?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var one int
	err = pool.QueryRow(ctx, `SELECT 1`).Scan(&one)
	if err == nil || !DatabaseDown(err) {
		t.Errorf("a query to a closed port: %v; want an error DatabaseDown knows", err)
	}
	// A server that refuses the database's name is misconfiguration, not
	// an outage.
	url := pgcluster.Database(t)
	bad, err := pgxpool.New(ctx, url[:strings.LastIndex(url, "/")]+"/no_such_database")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.QueryRow(ctx, `SELECT 1`).Scan(&one); err == nil || DatabaseDown(err) {
		t.Errorf("a database that does not exist: %v; want an error DatabaseDown does not claim", err)
	}
}

// A heavy read the server cancels at its statement_timeout comes back as
// an error of kind Timeout that says what to do, from the primary's read
// pool and (the same code) from a replica's; the writers' pool has no such
// timeout. The reads wait on a lock here, which the timeout counts as any
// other slowness.
func TestReadsStatementTimeout(t *testing.T) {
	ctx := context.Background()
	url := pgcluster.Database(t)
	log := slog.New(slog.DiscardHandler)
	st, err := Open(ctx, url, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rp := ReadPool{Size: 2, StatementTimeout: 300 * time.Millisecond}
	heavy, err := OpenReadPool(ctx, url, rp, log)
	if err != nil {
		t.Fatal(err)
	}
	defer heavy.Close()
	node, err := st.UpsertNode(ctx, Node{Name: "n1", InstanceID: 1, IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "drops", Title: "Drops", Kind: KindRate}}); err != nil {
		t.Fatal(err)
	}
	var timeout string
	if err := heavy.pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "300ms" {
		t.Fatalf("the read pool's statement_timeout is %q (%v), want 300ms", timeout, err)
	}
	if err := st.pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "0" {
		t.Fatalf("the primary's statement_timeout is %q (%v), want none", timeout, err)
	}

	// Hold every table the reads below read.
	lock, err := st.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE rollup_samples, rollup_histograms, reports, events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, r := range []struct {
		name    string
		replica bool
	}{{"the primary's read pool", false}, {"a replica's read pool", true}} {
		reads := NewReads(st, heavy, nil, rp, log)
		if r.replica {
			// The replica is the same database here: what matters is that
			// a cancelled statement is not taken for a replica that cannot
			// be reached, and is not run again on the primary.
			reads = NewReads(st, heavy, heavy, rp, log)
		}
		for _, q := range []struct {
			what string
			read func() error
		}{
			{"rollups", func() error {
				_, _, err := reads.ReadRollups(ctx, RollupQuery{NodeIDs: []int32{node}, Res: RollupHour, From: now.Add(-400 * 24 * time.Hour), To: now})
				return err
			}},
			{"series", func() error {
				_, err := reads.Series(ctx, node, "drops", now.Add(-time.Hour), now, time.Minute)
				return err
			}},
			{"events", func() error { _, err := reads.Events(ctx, node, "drops", now.Add(-time.Hour), now, 10); return err }},
		} {
			t.Run(r.name+"/"+q.what, func(t *testing.T) {
				start := time.Now()
				err := q.read()
				took := time.Since(start)
				if errkind.Of(err) != errkind.Timeout {
					t.Fatalf("read = %v (kind %v), want kind timeout", err, errkind.Of(err))
				}
				for _, want := range []string{"reading the " + q.what, "took longer than 300ms", "--reads.statement-timeout", "shorter period"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("message %q does not say %q", err, want)
					}
				}
				// Cancelled once, not twice (replica, then primary).
				if took < 250*time.Millisecond || took > 3*time.Second {
					t.Errorf("the read took %v, want about the 300ms timeout once", took)
				}
				if reads.down.Load() {
					t.Error("a statement timeout was taken for a replica that cannot be reached")
				}
			})
		}
	}
}
