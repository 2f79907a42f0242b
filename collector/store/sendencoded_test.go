package store

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sendEncoded stores what pgx's own batch stores for the same statements,
// returns the first failing statement's error as pgx does (a PgError,
// the ones after it not run), leaves the connection usable, and keeps
// its buffer: a second batch of the same size is built in the first's.
func TestSendEncodedAsPgxBatch(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for _, tbl := range []string{"send_pgx", "send_encoded"} {
		if _, err := s.pool.Exec(ctx, `create table `+tbl+` (i int4 check (i > 0), a int8[], txt text, ts timestamptz, j jsonb[], n int4[])`); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	queue := func(tbl string, bad bool) *pgx.Batch {
		b := &pgx.Batch{}
		ins := `insert into ` + tbl + ` values ($1, $2, $3, $4, $5, $6)`
		b.Queue(ins, int32(1), []int64{-5, 1 << 40}, "text ü", at, [][]byte{[]byte(`{"k":1}`), nil}, []int32(nil))
		if bad {
			b.Queue(ins, int32(-1), []int64{}, nil, nil, nil, []int32{7})
		}
		b.Queue(ins, int32(2), []int64(nil), nil, at.Add(time.Hour), [][]byte{}, []int32{3, 4})
		return b
	}
	run := func(tbl string, bad bool, buf []byte, encoded bool) ([]byte, error) {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if encoded {
			buf, err = sendEncoded(ctx, tx, queue(tbl, bad), buf)
		} else {
			err = tx.SendBatch(ctx, queue(tbl, bad)).Close()
		}
		if err != nil {
			return buf, err
		}
		return buf, tx.Commit(ctx)
	}
	if _, err := run("send_pgx", false, nil, false); err != nil {
		t.Fatal(err)
	}
	buf, err := run("send_encoded", false, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	rows := func(tbl string) string {
		var out string
		if err := s.pool.QueryRow(ctx, `select coalesce(string_agg(t::text, ' | ' order by i), '') from `+tbl+` t`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got, want := rows("send_encoded"), rows("send_pgx"); got != want || want == "" {
		t.Errorf("sendEncoded stored %q, pgx's batch %q", got, want)
	}

	again, err := run("send_encoded", false, buf[:0], true)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(buf) || unsafe.SliceData(again) != unsafe.SliceData(buf) {
		t.Errorf("a batch of the same size took a new buffer (%d bytes, was %d)", len(again), len(buf))
	}

	_, errPgx := run("send_pgx", true, nil, false)
	_, errEnc := run("send_encoded", true, buf, true)
	var pgErr, pgxErr *pgconn.PgError
	if !errors.As(errEnc, &pgErr) || !errors.As(errPgx, &pgxErr) || pgErr.Code != pgxErr.Code || pgErr.Code != "23514" {
		t.Fatalf("failing batch: sendEncoded %v, pgx's %v", errEnc, errPgx)
	}
	// A batch whose context ends fails with the context's error and its
	// connection is closed, not lent again with answers unread.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sendEncoded(done, tx, queue("send_encoded", false), buf); !errors.Is(err, context.Canceled) {
		t.Errorf("a batch sent with an ended context: %v, want context.Canceled", err)
	}
	if !tx.Conn().PgConn().IsClosed() {
		t.Error("the connection of a batch cut short is not closed")
	}
	_ = tx.Rollback(ctx)
	// Nothing of the failed batches stored, and every connection works.
	for range 2 * int(s.pool.Stat().MaxConns()) {
		if _, err := s.pool.Exec(ctx, `select 1`); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := rows("send_encoded"), rows("send_pgx"); len(got) != 2*len(want)+len(" | ") {
		t.Errorf("after a failed batch: sendEncoded's table %q, pgx's %q (twice over)", got, want)
	}
}
