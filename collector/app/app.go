// Package app wires the collector's parts together: store, ingest, HTTP.
// It is used by the nbs-collector command and by end-to-end tests alike.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/nodeconfig"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/tlsfiles"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
	"github.com/nbs-project/nbs/web"
)

type Collector struct {
	cfg     Config
	log     *slog.Logger
	metrics *telemetry.Metrics

	mu       sync.Mutex
	grpcAddr net.Addr
	httpAddr net.Addr
	ready    chan struct{}
}

// New prepares a collector; cfg is DefaultConfig with changes, and is
// validated when Run starts.
func New(cfg Config, log *slog.Logger) *Collector {
	return &Collector{cfg: cfg, log: log, metrics: telemetry.New(), ready: make(chan struct{})}
}

// Ready is closed once both listeners accept connections.
func (c *Collector) Ready() <-chan struct{} { return c.ready }

// Addrs returns the bound addresses (useful with port 0); valid after Ready.
func (c *Collector) Addrs() (grpcAddr, httpAddr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grpcAddr.String(), c.httpAddr.String()
}

// Run serves until ctx ends, then shuts down gracefully.
func (c *Collector) Run(ctx context.Context) error {
	if err := c.cfg.Validate(); err != nil {
		return err
	}
	st, err := store.Open(ctx, c.cfg.DBURL, c.log)
	if err != nil {
		return err
	}
	defer st.Close()

	grpcLis, err := net.Listen("tcp", c.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen for gRPC on %s: %w", c.cfg.GRPCAddr, err)
	}
	httpLis, err := net.Listen("tcp", c.cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen for HTTP on %s: %w", c.cfg.HTTPAddr, err)
	}
	c.mu.Lock()
	c.grpcAddr, c.httpAddr = grpcLis.Addr(), httpLis.Addr()
	c.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	alertCfg := c.cfg.Alert
	if alertCfg.ExternalURL = c.cfg.ExternalURL; alertCfg.ExternalURL == "" {
		alertCfg.ExternalURL = alert.DefaultExternalURL(httpLis.Addr().String())
	}
	alerts, err := alert.New(st, alertCfg, c.log.With("part", "alert"), c.metrics)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	writerOpts := ingest.DefaultWriterOptions()
	writerOpts.Workers, writerOpts.OnStored = c.cfg.DBWriters, alerts.OnStored
	writer := ingest.NewWriter(st, writerOpts, c.log.With("part", "writer"), c.metrics)
	limits := ingest.DefaultLimits()
	limits.MaxAge = c.cfg.Retention
	configs := nodeconfig.New(st, c.log.With("part", "nodeconfig"))
	configs.SetPingPeers(c.cfg.PingPeers)
	authMode, _ := c.cfg.nodeAuthMode() // checked by Validate
	auth, err := nodeauth.NewAuthenticator(st.Pool(), nodeauth.Options{Mode: authMode,
		BootstrapTokenFile: c.cfg.BootstrapTokenFile, IdentityMapFile: c.cfg.NodeIdentityMapFile}, c.log.With("part", "nodeauth"))
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	switch {
	case authMode == nodeauth.ModeNone:
		c.log.Warn("node names are not verified (--grpc.node-auth=none): any client that reaches the gRPC port can report as any node; use enroll or mtls outside a trusted network")
	case authMode == nodeauth.ModeEnroll && c.cfg.GRPCTLSCert == "":
		c.log.Warn("nodes enroll over plaintext: bootstrap token and node credentials can be read on the network; set --grpc.tls-cert-file and --grpc.tls-key-file")
	}
	ingestSrv := ingest.NewServer(st, writer, ingest.ServerOptions{Limits: limits, Config: configs, Auth: auth}, c.log.With("part", "ingest"), c.metrics)
	configs.SetPusher(ingestSrv)
	identities := nodeauth.NewAdmin(st, ingestSrv, authMode, c.log.With("part", "nodeauth"))

	grpcOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.cfg.MaxMsgSize),
		grpc.InitialWindowSize(c.cfg.StreamWindow),
		grpc.InitialConnWindowSize(16 * c.cfg.StreamWindow),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if c.cfg.GRPCTLSCert != "" {
		tlsCfg, err := tlsfiles.Server(c.cfg.GRPCTLSCert, c.cfg.GRPCTLSKey, c.cfg.GRPCClientCA, c.log.With("part", "tls"))
		if err != nil {
			grpcLis.Close()
			httpLis.Close()
			return fmt.Errorf("gRPC TLS: %w", err)
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	} else {
		c.log.Warn("agent streams are plaintext: set --grpc.tls-cert-file and --grpc.tls-key-file outside a trusted network")
	}
	grpcSrv := grpc.NewServer(grpcOpts...)
	nbsv1.RegisterAgentServiceServer(grpcSrv, ingestSrv)

	alerts.SetThresholds(configs)
	handler := httpHandler(st, ingestSrv, configs, api.Parts{NodeConfig: configs, Alerts: alerts, Identities: identities}, web.Handler(),
		c.log.With("part", "api"), c.metrics)
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return runCtx }}

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Go(func() { writer.Run(runCtx) })
	wg.Go(func() { c.retain(runCtx, st) })
	wg.Go(func() { configs.Listen(runCtx, st.Pool()) })
	wg.Go(func() { identities.Listen(runCtx, st.Pool()) })
	wg.Go(func() { alerts.Run(runCtx) })
	wg.Go(func() {
		if err := grpcSrv.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("serve gRPC: %w", err)
		}
	})
	wg.Go(func() {
		if err := httpSrv.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve HTTP: %w", err)
		}
	})
	c.log.Info("collector ready", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String())
	close(c.ready)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	c.log.Info("collector stopping")
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	_ = httpSrv.Shutdown(shutdownCtx)
	// Streams are long-lived, so GracefulStop would wait for agents to hang
	// up; stopping is safe because nothing un-acked is lost: agents resend.
	grpcSrv.Stop()
	cancel()
	wg.Wait()
	return runErr
}

// httpHandler is the whole HTTP surface: the API answers the node routes
// from q itself, and parts the rest of the route table.
func httpHandler(q api.Queries, live api.Live, thresholds api.Thresholds, parts api.Parts, ui http.Handler,
	log *slog.Logger, m *telemetry.Metrics) http.Handler {
	a := api.New(q, live, ui, log, m)
	a.SetThresholds(thresholds)
	parts.Nodes = a
	return a.Handler(api.Routes(parts))
}

// retain drops day partitions older than the retention, hourly.
func (c *Collector) retain(ctx context.Context, st *store.Store) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		dropped, err := st.DropPartitionsBefore(ctx, time.Now().Add(-c.cfg.Retention))
		if err != nil && ctx.Err() == nil {
			c.log.Warn("retention", "err", err)
		}
		if len(dropped) > 0 {
			c.log.Info("retention dropped partitions", "partitions", dropped)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
