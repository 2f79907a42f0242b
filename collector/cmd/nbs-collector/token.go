package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
)

// runToken is `nbs-collector token …`.
func runToken(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cmd := access.TokenCommand{
		Open: func(ctx context.Context, url string) (*pgxpool.Pool, func(), error) {
			// store.Open applies pending migrations, so the first token
			// can be made on a database no collector has touched yet.
			st, err := store.Open(ctx, url, log)
			if err != nil {
				return nil, nil, err
			}
			return st.Pool(), st.Close, nil
		},
		Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Log: log,
	}
	return cmd.Run(ctx, args)
}
