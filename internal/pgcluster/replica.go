package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"
)

// StartStandby copies c with pg_basebackup into a new cluster in opts.Dir
// and starts it as c's streaming-replication standby (a hot standby:
// readable, not writable). The copy runs as the server user, like every
// server binary here; c must be running.
func (c *Cluster) StartStandby(ctx context.Context, opts Options) (*Cluster, error) {
	s, err := open(opts)
	if err != nil {
		return nil, err
	}
	if err := s.prepareDir(); err != nil {
		return nil, err
	}
	if s.initialised() {
		return nil, fmt.Errorf("standby dir %s already holds a cluster", s.dir)
	}
	// -R writes standby.signal and primary_conninfo; -X stream copies the
	// WAL written meanwhile, so the copy starts consistent.
	out, err := s.run.output(ctx, s.dir, "pg_basebackup", "-D", s.dataDir, "-h", "127.0.0.1",
		"-p", strconv.Itoa(c.port), "-U", superuser, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	if err != nil {
		return nil, fmt.Errorf("pg_basebackup from port %d into %s: %w: %s", c.port, s.dataDir, err, bytes.TrimSpace(out))
	}
	if err := s.startOn(ctx, opts.Port); err != nil {
		return nil, err
	}
	s.log.Info("started PostgreSQL standby", "dir", s.dir, "port", s.port, "primary_port", c.port)
	return s, nil
}

// RequireSynchronousStandby makes every commit on c wait until a standby
// has it on disk (synchronous_standby_names = '*'), so a failover to that
// standby loses no transaction c acknowledged. Set it on the primary after
// StartStandby, so the standby's copy does not carry it: once promoted, it
// has no standby to wait for.
func (c *Cluster) RequireSynchronousStandby(ctx context.Context) error {
	conn, err := c.adminConn(ctx)
	if err != nil {
		return fmt.Errorf("require a synchronous standby: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("require a synchronous standby: %s: %w", q, err)
		}
	}
	// Wait until the standby is streaming and counted synchronous.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`).Scan(&n); err != nil {
			return fmt.Errorf("require a synchronous standby: read pg_stat_replication: %w", err)
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("require a synchronous standby: none is streaming synchronously after 30s (server log %s)", c.logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Crash stops the server the way a crash or a power cut does: no shutdown
// checkpoint, clients cut off at once (pg_ctl stop -m immediate).
func (c *Cluster) Crash(ctx context.Context) error {
	out, err := c.run.output(ctx, c.dir, "pg_ctl", "stop", "-D", c.dataDir, "-m", "immediate", "-w", "-t", "60")
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate %s: %w: %s", c.dataDir, err, bytes.TrimSpace(out))
	}
	return nil
}

// Promote turns a standby into a primary and waits until it takes writes.
func (c *Cluster) Promote(ctx context.Context) error {
	out, err := c.run.output(ctx, c.dir, "pg_ctl", "promote", "-D", c.dataDir, "-w", "-t", "60")
	if err != nil {
		return fmt.Errorf("pg_ctl promote %s: %w: %s", c.dataDir, err, bytes.TrimSpace(out))
	}
	c.log.Info("promoted PostgreSQL standby", "dir", c.dir, "port", c.port)
	return nil
}
