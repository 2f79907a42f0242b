// Package pgcluster runs a throwaway PostgreSQL cluster for tests and for
// `make run`: initdb into a directory, start the server on 127.0.0.1 plus a
// unix socket inside that directory, and hand out connection URLs.
//
// A cluster is laid out as
//
//	Dir/data          PGDATA (owned by the server user)
//	Dir/sock          unix socket directory
//	Dir/postgres.log  server log (pg_ctl -l)
//
// The server binaries refuse to run as root, so when this process is root
// they run as the "postgres" user through runuser, and Dir is chowned to
// that user; otherwise they run as the current user.
//
// Test packages use the helpers in testing.go:
//
//	func TestMain(m *testing.M) { pgcluster.Main(m) }
//	func TestX(t *testing.T) { url := pgcluster.Database(t); ... }
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DatabaseName is the database Start makes sure exists.
const DatabaseName = "nbs"

// superuser is the role initdb creates (-U); authentication is trust, so
// URLs carry no password.
const superuser = "postgres"

// Options configure Start.
type Options struct {
	// Dir holds the cluster (data, socket dir, log). Created if missing.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one. When a
	// cluster is already running in Dir, 0 accepts whatever port it has.
	Port int
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// BinDir holds initdb, pg_ctl and postgres. Empty means $NBS_PG_BINDIR,
	// then /usr/lib/postgresql/15/bin, then other installed versions,
	// then the directory of pg_ctl on $PATH.
	BinDir string
}

// Cluster is a started (or reused) PostgreSQL cluster.
type Cluster struct {
	dir     string
	dataDir string
	sockDir string
	logPath string
	port    int
	run     *runner
	log     *slog.Logger
}

// startAttempts bounds retries when a port picked by Port 0 was taken by
// someone else between picking and binding.
const startAttempts = 3

// Start initialises a cluster in opts.Dir if there is none yet, starts it
// unless it is already running (a running one is reused as is), and makes
// sure the database "nbs" exists. Errors wrapping ErrNoPostgres mean the
// server binaries were not found.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := open(opts)
	if err != nil {
		return nil, err
	}
	if err := c.prepareDir(); err != nil {
		return nil, err
	}

	if c.initialised() {
		running, err := c.running(ctx)
		if err != nil {
			return nil, err
		}
		if running {
			port, err := c.pidFilePort()
			if err != nil {
				return nil, err
			}
			if opts.Port != 0 && opts.Port != port {
				return nil, fmt.Errorf("cluster in %s is already running on port %d, not %d; stop it first (pg_ctl -D %s stop)", c.dir, port, opts.Port, c.dataDir)
			}
			c.port = port
			c.log.Info("reusing running PostgreSQL cluster", "dir", c.dir, "port", port)
			if err := c.ensureDatabase(ctx); err != nil {
				return nil, err
			}
			return c, nil
		}
	} else if err := c.initdb(ctx); err != nil {
		return nil, err
	}

	if err := c.startOn(ctx, opts.Port); err != nil {
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// startOn starts the server on port, or on a free port it picks when port
// is 0, trying again when another process took the picked one first.
func (c *Cluster) startOn(ctx context.Context, port int) error {
	for attempt := 1; ; attempt++ {
		p := port
		if p == 0 {
			var err error
			if p, err = freePort(); err != nil {
				return err
			}
		}
		err := c.start(ctx, p)
		if err == nil {
			return nil
		}
		// Only a port we picked ourselves is worth another try.
		if port != 0 || attempt == startAttempts || !errors.Is(err, errPortInUse) {
			return err
		}
		c.log.Info("picked port was taken, retrying", "port", p)
	}
}

// StopDir stops the cluster in opts.Dir if one is running there and
// reports whether it was. It never initialises or starts anything.
func StopDir(ctx context.Context, opts Options) (wasRunning bool, err error) {
	c, err := open(opts)
	if err != nil {
		return false, err
	}
	if !c.initialised() {
		return false, nil
	}
	running, err := c.running(ctx)
	if err != nil || !running {
		return false, err
	}
	return true, c.Stop(ctx)
}

// open resolves paths and binaries without touching the file system.
func open(opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("pgcluster: Options.Dir is empty")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolve cluster dir %s: %w", opts.Dir, err)
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("pgcluster: port %d out of range", opts.Port)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	run, err := newRunner(binDir)
	if err != nil {
		return nil, err
	}
	return &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		run:     run,
		log:     log,
	}, nil
}

// URL is the connection URL of the "nbs" database.
func (c *Cluster) URL() string { return c.dbURL(DatabaseName) }

// AdminURL is the connection URL of the "postgres" maintenance database.
func (c *Cluster) AdminURL() string { return c.dbURL("postgres") }

// Port is the TCP port the server listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// Dir is the absolute cluster directory.
func (c *Cluster) Dir() string { return c.dir }

// LogPath is the server log file.
func (c *Cluster) LogPath() string { return c.logPath }

func (c *Cluster) dbURL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.port, db)
}

// identRE is deliberately narrower than PostgreSQL's identifier rules so
// names never need quoting surprises (case folding, length truncation).
var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CreateDatabase creates an empty database and returns its URL. name must
// be lower case letters, digits and underscores (at most 63 bytes).
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if !identRE.MatchString(name) {
		return "", fmt.Errorf("create database %q: name must match %s", name, identRE)
	}
	conn, err := c.adminConn(ctx)
	if err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// template0 is never connected to, so concurrent creates from parallel
	// tests cannot fail with "source database is being accessed".
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return c.dbURL(name), nil
}

// DropDatabase drops a database, terminating its sessions; a missing
// database is not an error.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	conn, err := c.adminConn(ctx)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down (pg_ctl stop -m fast). Stopping a cluster
// that is not running is not an error.
func (c *Cluster) Stop(ctx context.Context) error {
	out, err := c.run.output(ctx, c.dir, "pg_ctl", "stop", "-D", c.dataDir, "-m", "fast", "-w", "-t", "60")
	if err == nil {
		c.log.Info("stopped PostgreSQL cluster", "dir", c.dir)
		return nil
	}
	if running, serr := c.running(ctx); serr == nil && !running {
		return nil
	}
	return fmt.Errorf("pg_ctl stop %s: %w: %s", c.dataDir, err, bytes.TrimSpace(out))
}

func (c *Cluster) initialised() bool {
	_, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION"))
	return err == nil
}

// prepareDir creates Dir and the socket dir and hands both to the server
// user, which must also be able to traverse every parent of Dir.
func (c *Cluster) prepareDir() error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("create cluster dir %s: %w", c.dir, err)
	}
	if err := os.MkdirAll(c.sockDir, 0o755); err != nil {
		return fmt.Errorf("create socket dir %s: %w", c.sockDir, err)
	}
	// Unix socket paths are limited to 107 bytes; failing here beats a
	// server log line about a truncated path.
	if n := len(c.sockDir) + len("/.s.PGSQL.65535"); n > 107 {
		return fmt.Errorf("cluster dir %s is too long for a unix socket path (%d > 107 bytes); use a shorter Dir", c.dir, n)
	}
	if err := c.run.own(c.dir); err != nil {
		return err
	}
	if err := c.run.own(c.sockDir); err != nil {
		return err
	}
	return c.run.checkTraversable(filepath.Dir(c.dir))
}

func (c *Cluster) initdb(ctx context.Context) error {
	// --no-sync: the cluster is throwaway; losing it to an OS crash is fine.
	out, err := c.run.output(ctx, c.dir, "initdb",
		"-D", c.dataDir, "-U", superuser, "--auth=trust", "--no-locale",
		"--encoding=UTF8", "--no-sync", "--no-instructions")
	if err != nil {
		return fmt.Errorf("initdb %s: %w: %s", c.dataDir, err, bytes.TrimSpace(out))
	}
	// Settings live in nbs.conf, rewritten at every start, so clusters
	// made by an older version of this package pick up new settings.
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("initdb %s: open postgresql.conf: %w", c.dataDir, err)
	}
	_, werr := f.WriteString("\n# Added by internal/pgcluster; settings are in nbs.conf.\ninclude_if_exists = 'nbs.conf'\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("initdb %s: append to postgresql.conf: %w", c.dataDir, err)
	}
	c.log.Info("initialised PostgreSQL cluster", "dir", c.dir)
	return nil
}

// errPortInUse marks a start failure caused by the port being taken.
var errPortInUse = errors.New("port in use")

func (c *Cluster) start(ctx context.Context, port int) error {
	if err := c.writeConf(port); err != nil {
		return err
	}
	// Remember where this attempt's log output begins so the error shows
	// the lines of this failure, not of an earlier one.
	var logStart int64
	if st, err := os.Stat(c.logPath); err == nil {
		logStart = st.Size()
	}
	out, err := c.run.output(ctx, c.dir, "pg_ctl", "start", "-D", c.dataDir, "-l", c.logPath, "-w", "-t", "60")
	if err != nil {
		tail := logTail(c.logPath, logStart, 20)
		err = fmt.Errorf("pg_ctl start %s (port %d): %w: %s\nserver log %s:\n%s",
			c.dataDir, port, err, bytes.TrimSpace(out), c.logPath, tail)
		if strings.Contains(tail, "could not bind") || strings.Contains(tail, "could not create any TCP/IP sockets") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return err
	}
	c.port = port
	c.log.Info("started PostgreSQL cluster", "dir", c.dir, "port", port, "log", c.logPath)
	return nil
}

// writeConf writes the settings for a dev/test box: durable (fsync and
// synchronous_commit on) but small, no JIT, TCP on loopback only.
func (c *Cluster) writeConf(port int) error {
	conf := fmt.Sprintf(`# Written by internal/pgcluster at every start; edits are lost.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = %s
max_connections = 100
shared_buffers = 128MB
fsync = on
synchronous_commit = on
jit = off
logging_collector = off
log_line_prefix = '%%m [%%p] %%q%%u@%%d '
log_timezone = 'UTC'
timezone = 'UTC'
`, port, confQuote(c.sockDir))
	path := filepath.Join(c.dataDir, "nbs.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return c.run.own(path)
}

func confQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// running asks pg_ctl whether the postmaster in postmaster.pid is alive;
// a stale pid file after a crash counts as not running.
func (c *Cluster) running(ctx context.Context) (bool, error) {
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	out, err := c.run.output(ctx, c.dir, "pg_ctl", "status", "-D", c.dataDir)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 3: // documented: not running
		return false, nil
	default:
		return false, fmt.Errorf("pg_ctl status %s: %w: %s", c.dataDir, err, bytes.TrimSpace(out))
	}
}

// pidFilePort reads the port from line 4 of postmaster.pid, which is what
// the running server actually uses (nbs.conf may have been rewritten).
func (c *Cluster) pidFilePort() (int, error) {
	path := filepath.Join(c.dataDir, "postmaster.pid")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read port of running cluster: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, fmt.Errorf("read port of running cluster: %s has %d lines, want at least 4", path, len(lines))
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return 0, fmt.Errorf("read port of running cluster from %s: %w", path, err)
	}
	return port, nil
}

// adminConn connects to the maintenance database, retrying briefly: a
// reused cluster may still be starting up or recovering.
func (c *Cluster) adminConn(ctx context.Context) (*pgx.Conn, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.AdminURL())
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to %s: %w (server log %s)", c.AdminURL(), err, c.logPath)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := c.adminConn(ctx)
	if err != nil {
		return fmt.Errorf("ensure database %s: %w", DatabaseName, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", DatabaseName).Scan(&exists); err != nil {
		return fmt.Errorf("ensure database %s: %w", DatabaseName, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{DatabaseName}.Sanitize())
	// A concurrent Start on the same cluster may have won the race.
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") {
		return fmt.Errorf("ensure database %s: %w", DatabaseName, err)
	}
	return nil
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the server binds, which Start handles by retrying.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns up to n last lines of the file from offset on.
func logTail(path string, offset int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	// The interesting lines are at the end; 64 KiB is plenty for 20 lines.
	if st, err := f.Stat(); err == nil && st.Size()-offset > 64<<10 {
		offset = st.Size() - 64<<10
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(log is empty)"
	}
	return strings.Join(lines, "\n")
}
