package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves Go's profiles (/debug/pprof/) on their own loopback
// listener, for measuring what the collector holds (BENCHMARKS.md,
// "Collector memory per connected node"), until ctx ends. Off unless
// --debug.pprof-listen-address is set; Validate keeps it on loopback, as
// profiles are no one else's business and cost CPU to take.
func servePprof(ctx context.Context, addr string, log *slog.Logger) (served net.Addr, wait func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for pprof on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A CPU profile or trace runs for its ?seconds: writes may take long.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve pprof", "err", err)
		}
	}()
	stopped := context.AfterFunc(ctx, func() { _ = srv.Close() })
	log.Info("serving Go profiles", "pprof", lis.Addr().String())
	return lis.Addr(), func() {
		stopped()
		_ = srv.Close()
		<-done
	}, nil
}
