package store

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DownRetryAfter is what a client is told to wait (Retry-After) when the
// database cannot be reached: about what a failover to a standby takes.
const DownRetryAfter = 5 * time.Second

// DownMessage answers a request the database could not serve because it
// cannot be reached; the collector's log has the detail.
const DownMessage = "the database cannot be reached (down, restarting or failing over); retry in a few seconds"

// ErrUnreachable is for a caller that judges the database unreachable by a
// deadline of its own (a lookup of milliseconds still unanswered after
// seconds: a host gone mid-failover). DatabaseDown reports an error that
// wraps it as it does a refused connection.
var ErrUnreachable = errors.New("the database cannot be reached")

// DatabaseDown reports whether err says PostgreSQL could not be reached or
// is not serving — no connection (refused, reset, timed out, a failover in
// progress), a server shutting down or starting up, no connection slot —
// rather than anything about the request. The HTTP side answers such
// errors 503 with Retry-After: the same request will succeed once the
// database is back, and a 500 would send people looking for a bug.
//
// A cancelled context is not the database's doing (the caller left), nor
// is a deadline the caller set (who set it decides what it means), and a
// connection the server refused for its credentials or database name is
// a configuration fault that retrying will not mend.
func DatabaseDown(err error) bool {
	if errors.Is(err, ErrUnreachable) {
		return true
	}
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		if errors.As(err, &pgErr) {
			switch pgErr.Code[:2] {
			case "28", "3D": // invalid authorization, invalid catalog name
				return false
			}
		}
		return true
	}
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // admin or crash shutdown, cannot connect now (starting, recovering)
			"53300": // too many connections
			return true
		}
		return pgErr.Code[:2] == "08" // connection exception
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Some deadline of the caller's, not a connection timing out
		// (which comes as a ConnectError, or a net.Error of its own);
		// context.DeadlineExceeded is a net.Error too, so say so first.
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// queryCanceled reports whether PostgreSQL cancelled a statement: its
// statement_timeout ran out, or someone asked it to stop (pgx does when a
// query's context ends, which the caller can tell by its context).
func queryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// uniqueViolation reports whether err is PostgreSQL refusing a row its
// unique index already has: the write paths that try the cheap way first
// (a batch with no resend, a minute no fold reached) fall back on it.
func uniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
