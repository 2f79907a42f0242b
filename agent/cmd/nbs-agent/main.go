// Command nbs-agent measures this node's kernel networking and streams it to
// an NBS collector.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/buildinfo"
)

// runningMaxProcs is the running agent's GOMAXPROCS unless the operator set
// one: its work (a collection every interval, the evidence rings' polls) is
// a few ms a second and gains nothing from a second P, which cost it
// wakeups of idle threads to run what one P would have run, and since Go
// 1.25 a read of its cgroup's CPU limit every second (the runtime's
// GOMAXPROCS updates, which a GOMAXPROCS set by the program ends):
// bench/agentcost BenchmarkAgentIdle.
const runningMaxProcs = 1

// runningTimerSlack is the least timer slack of the running agent's
// threads (app.Config.TimerSlack): the Go runtime's sysmon then wakes
// with other timers rather than alone every 20 µs while the agent
// collects, half of an idle agent's context switches
// (bench/agentcost BenchmarkAgentIdle).
const runningTimerSlack = time.Millisecond

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("nbs-agent", flag.ContinueOnError)
	cfg := app.DefaultConfig()
	cfg.RegisterFlags(fs)
	level := fs.String("log.level", "info", "log level: debug, info, warn, error")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("nbs-agent " + buildinfo.Version())
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "nbs-agent: --log.level %q: use debug, info, warn or error\n", *level)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "nbs-agent: %v\n", err)
		return 2
	}
	if os.Getenv("GOMAXPROCS") == "" {
		cfg.MaxProcs = runningMaxProcs
	}
	cfg.TimerSlack = runningTimerSlack
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if cfg.Unpin {
		if err := app.Unpin(cfg, log); err != nil {
			log.Error("unpin failed", "err", err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.New(cfg, log).Run(ctx); err != nil {
		log.Error("agent failed", "err", err)
		return 1
	}
	return 0
}
