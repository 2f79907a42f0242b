// Command devrun is what `make run` executes: it runs the whole system on
// this machine — a throwaway PostgreSQL cluster in .run/pg (reused across
// runs), bin/nbs-collector and one bin/nbs-agent — prefixes their output,
// and on Ctrl-C stops the children (leaving PostgreSQL up for next time).
//
//	go run ./deploy/local/devrun [flags]
//	go run ./deploy/local/devrun --stop-db     # what `make db-stop` runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintf(os.Stderr, "devrun: %v\n", err)
		stop()
		os.Exit(1)
	}
}

type config struct {
	root          string
	binDir        string
	runDir        string
	pgDir         string
	pgPort        int
	pgStop        bool
	stopDB        bool
	grpcAddr      string
	httpAddr      string
	interval      time.Duration
	agentArgs     []string
	collectorArgs []string
	readyTimeout  time.Duration
	stopTimeout   time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("devrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg                     config
		agentArgs, collArgs     string
		binDir, pgDir, rootFlag string
	)
	fs.StringVar(&rootFlag, "root", "", "repository root (default: found from the working directory)")
	fs.StringVar(&binDir, "bin", "bin", "directory with nbs-collector and nbs-agent, relative to the root")
	fs.StringVar(&pgDir, "pg.dir", ".run/pg", "PostgreSQL cluster directory, relative to the root")
	fs.IntVar(&cfg.pgPort, "pg.port", 55432, "PostgreSQL port on 127.0.0.1")
	fs.BoolVar(&cfg.pgStop, "pg.stop", false, "stop PostgreSQL on exit instead of leaving it running for the next run")
	fs.BoolVar(&cfg.stopDB, "stop-db", false, "only stop the PostgreSQL cluster in --pg.dir and exit")
	fs.StringVar(&cfg.grpcAddr, "collector.grpc-address", "127.0.0.1:7701", "collector gRPC listen address (the agent connects here)")
	fs.StringVar(&cfg.httpAddr, "collector.http-address", "127.0.0.1:7700", "collector HTTP listen address (UI, API, /readyz)")
	fs.StringVar(&collArgs, "collector.args", "", "extra collector arguments, shell-quoted")
	fs.DurationVar(&cfg.interval, "agent.interval", 0, "agent --interval (default: the agent's own)")
	fs.StringVar(&agentArgs, "agent.args", "", `extra agent arguments, shell-quoted, e.g. "--labels customer=acme"`)
	fs.DurationVar(&cfg.readyTimeout, "ready-timeout", 30*time.Second, "how long to wait for the collector's /readyz")
	fs.DurationVar(&cfg.stopTimeout, "stop-timeout", 10*time.Second, "how long a child gets after SIGTERM before SIGKILL")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (extra child arguments go in --agent.args / --collector.args)", fs.Args())
	}
	var err error
	if cfg.agentArgs, err = splitWords(agentArgs); err != nil {
		return nil, fmt.Errorf("--agent.args: %w", err)
	}
	if cfg.collectorArgs, err = splitWords(collArgs); err != nil {
		return nil, fmt.Errorf("--collector.args: %w", err)
	}
	if cfg.root = rootFlag; cfg.root == "" {
		if cfg.root, err = findRoot(); err != nil {
			return nil, err
		}
	}
	cfg.binDir = underRoot(cfg.root, binDir)
	cfg.pgDir = underRoot(cfg.root, pgDir)
	cfg.runDir = filepath.Join(cfg.root, ".run")
	return &cfg, nil
}

func underRoot(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

// findRoot walks up from the working directory to this module's go.mod,
// falling back to git, so `go run` works from any subdirectory.
func findRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/nbs-project/nbs\n") {
			return d, nil
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("find repository root: no go.mod of github.com/nbs-project/nbs above %s and git rev-parse failed (%v); pass --root", wd, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	out := newConsole(stdout, stderr)
	log := slog.New(slog.NewTextHandler(out.writer(stderr, "[devrun] ", nil), &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // the children's lines carry their own time
			}
			return a
		},
	}))

	if cfg.stopDB {
		return stopDB(ctx, cfg, out)
	}
	return runAll(ctx, cfg, out, log, getenv)
}

func stopDB(ctx context.Context, cfg *config, out *console) error {
	was, err := pgcluster.StopDir(ctx, pgcluster.Options{Dir: cfg.pgDir})
	if err != nil {
		return fmt.Errorf("stop PostgreSQL in %s: %w", cfg.pgDir, err)
	}
	if was {
		out.printf("stopped PostgreSQL in %s\n", cfg.pgDir)
	} else {
		out.printf("no PostgreSQL running in %s\n", cfg.pgDir)
	}
	return nil
}

func runAll(ctx context.Context, cfg *config, out *console, log *slog.Logger, getenv func(string) string) (err error) {
	collectorBin := filepath.Join(cfg.binDir, "nbs-collector")
	agentBin := filepath.Join(cfg.binDir, "nbs-agent")
	for _, bin := range []string{collectorBin, agentBin} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%s missing (run `make build` first): %w", bin, err)
		}
	}
	// A leftover collector from an earlier run would answer /readyz for
	// ours; say so instead of reporting the wrong process as ready.
	for _, addr := range []string{cfg.grpcAddr, cfg.httpAddr} {
		if err := checkFree(addr); err != nil {
			return err
		}
	}

	dbURL := getenv("NBS_DB_URL")
	if dbURL != "" {
		log.Info("using NBS_DB_URL; not starting PostgreSQL")
	} else {
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: cfg.pgDir, Port: cfg.pgPort, Logger: log})
		if err != nil {
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		dbURL = c.URL()
		defer func() {
			if !cfg.pgStop {
				out.printf("PostgreSQL keeps running at %s for the next run; `make db-stop` stops it.\n", dbURL)
				return
			}
			// ctx is cancelled by now; stopping must still happen.
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = errors.Join(err, c.Stop(sctx))
		}()
	}

	logDir := filepath.Join(cfg.runDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	// The collector replaces the admin token at every start and writes the
	// new one here (0600); an old file must not pass for this run's.
	tokenFile := filepath.Join(cfg.runDir, "admin-token")
	if err := os.Remove(tokenFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the previous admin token: %w", err)
	}
	collectorArgs := append([]string{
		"--db.url", dbURL,
		"--grpc.listen-address", cfg.grpcAddr,
		"--http.listen-address", cfg.httpAddr,
		"--auth.bootstrap-admin-file", tokenFile,
	}, cfg.collectorArgs...)
	agentArgs := []string{"--collector.address", dialAddr(cfg.grpcAddr)}
	if cfg.interval != 0 {
		agentArgs = append(agentArgs, "--interval", cfg.interval.String())
	}
	// Not the system's /var/lib/nbs/spool: reports of a demo must not be
	// replayed by a real agent installed on this host later.
	agentArgs = append(agentArgs, "--spool.dir", filepath.Join(cfg.runDir, "spool"))
	// A local run is thrown away at Ctrl-C: pinned programs would go on
	// counting after it (--agent.args "--bpf.pin-dir DIR" pins anyway).
	agentArgs = append(agentArgs, "--bpf.pin-dir", "none")
	agentArgs = append(agentArgs, cfg.agentArgs...)

	var children []*child
	// Stop in reverse start order: the agent first, so its last report
	// can still reach the collector.
	defer func() {
		for i := len(children) - 1; i >= 0; i-- {
			children[i].stop(cfg.stopTimeout, log)
		}
	}()

	collector, err := startChild("collector", collectorBin, collectorArgs, filepath.Join(logDir, "collector.log"), out)
	if err != nil {
		return err
	}
	children = append(children, collector)

	readyURL := "http://" + dialAddr(cfg.httpAddr) + "/readyz"
	if err := waitReady(ctx, readyURL, cfg.readyTimeout, collector); err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C while waiting
		}
		return err
	}

	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return fmt.Errorf("the collector is ready but wrote no admin token (--auth.bootstrap-admin-file): %w; see %s", err, collector.logPath)
	}

	agent, err := startChild("agent", agentBin, agentArgs, filepath.Join(logDir, "agent.log"), out)
	if err != nil {
		return err
	}
	children = append(children, agent)

	out.print(banner(cfg, dbURL, strings.TrimSpace(string(token)), tokenFile, collector.logPath, agent.logPath, getenv("NBS_DB_URL") == ""))

	select {
	case <-ctx.Done():
		log.Info("stopping")
		return nil
	case <-collector.done:
		return collector.unexpectedExit()
	case <-agent.done:
		return agent.unexpectedExit()
	}
}

// dialAddr turns a listen address into one to connect to: an empty or
// wildcard host means loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is not free (is another `make run` or collector still running?): %w", addr, err)
	}
	return l.Close()
}

// banner is the box printed once everything is up. It carries the admin
// token in a login URL: the terminal of whoever ran make run is where it
// belongs (the collector's log never has it).
func banner(cfg *config, dbURL, token, tokenFile, collectorLog, agentLog string, ownDB bool) string {
	base := "http://" + dialAddr(cfg.httpAddr)
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "<hostname>"
	}
	if u, err := url.Parse(dbURL); err == nil {
		dbURL = u.Redacted()
	}
	rel := func(p string) string {
		if r, err := filepath.Rel(cfg.root, p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	stopLine := "Ctrl-C stops everything"
	switch {
	case ownDB && !cfg.pgStop:
		stopLine += " (PostgreSQL keeps running; `make db-stop` stops it)"
	case !ownDB:
		stopLine += " (the NBS_DB_URL database is not touched)"
	}
	lines := []string{
		"NBS is running",
		"",
		"Log in      " + base + "/login#token=" + token,
		"UI          " + base + "/",
		"API         export NBS_TOKEN=$(cat " + rel(tokenFile) + ")",
		`            curl -H "Authorization: Bearer $NBS_TOKEN" ` + base + "/api/v1/nodes",
		`            curl -H "Authorization: Bearer $NBS_TOKEN" ` + base + "/api/v1/nodes/" + host + "/tree",
		"Database    " + dbURL,
		"Logs        " + rel(collectorLog) + ", " + rel(agentLog),
		"",
		"TCP resets (connects to a closed port; each gets a RST, reason NO_SOCKET):",
		"  for i in $(seq 20); do timeout 1 bash -c 'echo > /dev/tcp/127.0.0.1/9' ; done 2>/dev/null",
		"",
		stopLine,
	}
	return box(lines)
}

func box(lines []string) string {
	width := 0
	for _, l := range lines {
		width = max(width, len([]rune(l)))
	}
	var b strings.Builder
	b.WriteString("┌" + strings.Repeat("─", width+2) + "┐\n")
	for _, l := range lines {
		b.WriteString("│ " + l + strings.Repeat(" ", width-len([]rune(l))) + " │\n")
	}
	b.WriteString("└" + strings.Repeat("─", width+2) + "┘\n")
	return b.String()
}
