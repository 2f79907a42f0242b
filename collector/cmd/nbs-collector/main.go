// Command nbs-collector receives agent streams, stores them in PostgreSQL and
// serves the web UI and JSON API.
//
//	nbs-collector [flags]           run the collector
//	nbs-collector token <command>   create, list or revoke API tokens
//	nbs-collector nodes <command>   list, enroll, revoke, re-enroll or delete node identities
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/buildinfo"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "token" {
		os.Exit(runToken(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	if len(os.Args) > 1 && os.Args[1] == "nodes" {
		return nodesMain(os.Args[2:], os.Stdout, os.Stderr)
	}
	fs := flag.NewFlagSet("nbs-collector", flag.ContinueOnError)
	cfg := app.DefaultConfig()
	cfg.DBURL = os.Getenv("NBS_DB_URL")
	cfg.DBReadURL = os.Getenv("NBS_DB_READ_URL")
	cfg.RegisterFlags(fs)
	level := fs.String("log.level", "info", "log level: debug, info, warn, error")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("nbs-collector " + buildinfo.Version())
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "nbs-collector: --log.level %q: use debug, info, warn or error\n", *level)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "nbs-collector: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.New(cfg, log).Run(ctx); err != nil {
		log.Error("collector failed", "err", err)
		return 1
	}
	return 0
}
