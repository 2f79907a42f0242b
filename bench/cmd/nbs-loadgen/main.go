// Command nbs-loadgen simulates a fleet of NBS agents against a collector
// (see bench/loadgen): N nodes over real gRPC streams with realistic trees,
// a share of them troubled, periodic snapshots and reconnects. It prints a
// progress line and, at the end, acknowledged samples per second and the
// report→ack latency percentiles.
//
//	nbs-loadgen --collector 127.0.0.1:7701 --nodes 5000 --duration 2m
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nbs-project/nbs/bench/loadgen"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nbs-loadgen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("nbs-loadgen", flag.ContinueOnError)
	var cfg loadgen.Config
	fs.StringVar(&cfg.Addr, "collector", "127.0.0.1:7701", "the collector's gRPC address")
	fs.IntVar(&cfg.Nodes, "nodes", 1000, "simulated nodes, each with its own stream (and connection, unless --nodes-per-conn)")
	fs.StringVar(&cfg.Prefix, "prefix", "sim-", "node names are this prefix and a number")
	fs.DurationVar(&cfg.Interval, "interval", 10*time.Second, "report interval of each node")
	fs.DurationVar(&cfg.Ramp, "ramp", 0, "spread the first connects over this long (default: one interval)")
	fs.Float64Var(&cfg.Troubled, "troubled", 0.05, "share of nodes whose tcp_reset branch streams children and evidence")
	fs.DurationVar(&cfg.SnapshotEvery, "snapshot.every", 5*time.Minute, "how often each node sends its full tree")
	fs.Float64Var(&cfg.ReconnectsPerHour, "reconnects-per-hour", 0, "agent reconnects per hour over the whole fleet")
	fs.BoolVar(&cfg.ReconnectInFlight, "reconnect-in-flight", false, "each reconnect drops the stream right after sending a report, before its ack (the report is resent)")
	fs.IntVar(&cfg.NodesPerConn, "nodes-per-conn", 1, "nodes' streams carried on each gRPC connection (the open-file limit is sized by connections: beyond ~18,000 nodes at the default 20,000 files, carry several a connection)")
	tokenFile := fs.String("bootstrap-token-file", "", "enroll with this fleet bootstrap token (a collector with --grpc.node-auth=enroll)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the simulation's choices")
	duration := fs.Duration("duration", time.Minute, "how long to run after the ramp (with --hold: how long the fleet may take to register)")
	hold := fs.Duration("hold", 0, "once every node has had a report acknowledged, run this long more and print the figures of this hold alone (ack percentiles, samples/s), with when the fleet had registered (default 0: no hold)")
	progress := fs.Duration("progress", 5*time.Second, "progress line every (0: none)")
	asJSON := fs.Bool("json", false, "print the final figures as JSON")
	verbose := fs.Bool("v", false, "log each stream's end")
	pprofAddr := fs.String("debug.pprof-listen-address", "", "loopback address serving the simulator's own Go profiles at /debug/pprof/ (heap, goroutines, CPU), e.g. 127.0.0.1:7719 (default: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("read bootstrap token: %w", err)
		}
		cfg.BootstrapToken = strings.TrimSpace(string(b))
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := raiseFileLimit(cfg.Nodes, cfg.NodesPerConn); err != nil {
		return err
	}
	f, err := loadgen.New(cfg)
	if err != nil {
		return err
	}
	if *pprofAddr != "" {
		stopProfiles, err := serveProfiles(*pprofAddr)
		if err != nil {
			return err
		}
		defer stopProfiles()
	}
	ramp := cfg.Ramp
	if ramp <= 0 {
		ramp = cfg.Interval
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fmt.Fprintf(os.Stderr, "nbs-loadgen: %d nodes (%d metrics each, %.0f%% troubled) every %v against %s for %v\n",
		cfg.Nodes, len(f.Tree().Defs), cfg.Troubled*100, cfg.Interval, cfg.Addr, ramp+*duration+*hold)
	done := make(chan loadgen.Stats, 1)
	go func() { done <- f.Run(ctx, os.Stderr, *progress) }()
	held, err := holdAfterRegistration(ctx, f, ramp+*duration, *hold)
	cancel()
	s := <-done
	if err != nil {
		return err
	}
	if *hold > 0 {
		// The hold's own figures; the counts of the whole run follow.
		fmt.Fprintf(os.Stderr, "nbs-loadgen: registered after %v; the hold of %v: %v\n", s.AllRegistered.Round(time.Second), *hold, held)
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(map[string]any{
				"nodes": cfg.Nodes, "registered_s": s.AllRegistered.Seconds(), "hold_s": held.Elapsed.Seconds(),
				"samples_per_s": held.SamplesPerSecond(), "offered_samples_per_s": held.OfferedPerSecond(),
				"ack_p50_ms": ms(held.AckP50), "ack_p99_ms": ms(held.AckP99), "ack_max_ms": ms(held.AckMax),
				"reports": held.Reports, "acked": held.Acked, "rejected": held.Rejected, "resent": held.Resent,
				"reconnects": held.Reconnects, "stream_errors": held.Errors,
			})
		}
		fmt.Println(held)
		return nil
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{
			"nodes": cfg.Nodes, "elapsed_s": s.Elapsed.Seconds(), "reports": s.Reports, "acked": s.Acked,
			"samples_per_s": s.SamplesPerSecond(), "ack_p50_ms": ms(s.AckP50), "ack_p99_ms": ms(s.AckP99),
			"ack_max_ms": ms(s.AckMax), "rejected": s.Rejected, "resent": s.Resent, "reconnects": s.Reconnects,
			"stream_errors": s.Errors,
		})
	}
	fmt.Println(s)
	return nil
}

// holdAfterRegistration waits up to limit for every node to have had a
// report acknowledged (without hold: waits out limit), then runs hold
// more with the latency percentiles reset, and returns the hold's figures.
func holdAfterRegistration(ctx context.Context, f *loadgen.Fleet, limit, hold time.Duration) (loadgen.Stats, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	if hold <= 0 {
		select {
		case <-ctx.Done():
		case <-deadline.C:
		}
		return loadgen.Stats{}, nil
	}
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for f.Stats().AllRegistered == 0 {
		select {
		case <-ctx.Done():
			return loadgen.Stats{}, fmt.Errorf("interrupted before every node registered: %v", f.Stats())
		case <-deadline.C:
			return loadgen.Stats{}, fmt.Errorf("not every node registered within %v (the ramp and --duration): %v", limit, f.Stats())
		case <-poll.C:
		}
	}
	f.ResetLatency()
	before := f.Stats()
	select {
	case <-ctx.Done():
		return loadgen.Stats{}, fmt.Errorf("interrupted during the hold: %v", f.Stats())
	case <-time.After(hold):
	}
	return f.Stats().Since(before), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// raiseFileLimit lets one process hold the fleet's connections.
func raiseFileLimit(nodes, perConn int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("read open-file limit: %w", err)
	}
	set, err := fileLimit(nodes, perConn, l.Cur, l.Max)
	if err != nil {
		return err
	}
	if set == l.Cur {
		return nil
	}
	l.Cur = set
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("raise open-file limit to %d: %w", set, err)
	}
	return nil
}

// fileLimit is the soft open-file limit a fleet of nodes, perConn nodes'
// streams a connection, needs (cur when that is enough already). The hard
// limit is as far as an unprivileged process may go; beyond it the error
// says what to change.
func fileLimit(nodes, perConn int, cur, hard uint64) (uint64, error) {
	need := filesNeeded(nodes, perConn)
	switch {
	case cur >= need:
		return cur, nil
	case hard >= need:
		return need, nil
	}
	hint := "raise the hard limit"
	for p := max(perConn, 1) + 1; p <= maxNodesPerConn; p++ {
		if filesNeeded(nodes, p) <= hard {
			hint = fmt.Sprintf("use --nodes-per-conn %d or more", p)
			break
		}
	}
	return 0, fmt.Errorf("open-file limit too low: %d nodes at --nodes-per-conn %d are %d connections, which need %d open files, and the hard limit is %d: raise it (ulimit -n %d, as root) or %s",
		nodes, max(perConn, 1), connections(nodes, perConn), need, hard, need, hint)
}

// maxNodesPerConn is the most loadgen.Config accepts.
const maxNodesPerConn = 10000

func connections(nodes, perConn int) uint64 {
	perConn = max(perConn, 1)
	return uint64((nodes + perConn - 1) / perConn)
}

// filesNeeded is one file a connection, a tenth more for connections
// still closing as reconnects dial new ones, and room for the process's
// own files.
func filesNeeded(nodes, perConn int) uint64 {
	c := connections(nodes, perConn)
	return c + c/10 + 256
}

// serveProfiles serves Go's profiles of this process on addr, which must
// be a loopback address: a profile shows what the process holds.
func serveProfiles(addr string) (func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--debug.pprof-listen-address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--debug.pprof-listen-address %q: not a loopback address", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve profiles: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { srv.Close() }, nil
}
