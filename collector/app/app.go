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
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/nodeconfig"
	"github.com/nbs-project/nbs/collector/readlimit"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/retention"
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
	// reads answers the heavy queries (series, events, reports) from pools
	// of their own, on the primary and on the replica if there is one:
	// whatever a caller asks, the writers and token checks keep st's.
	heavy, err := store.OpenReadPool(ctx, c.cfg.DBURL, c.cfg.Reads.pool(), c.log.With("part", "read-pool"))
	if err != nil {
		return err
	}
	defer heavy.Close()
	var replica *store.Store
	if c.cfg.DBReadURL != "" {
		if replica, err = store.OpenReadPool(ctx, c.cfg.DBReadURL, c.cfg.Reads.pool(), c.log.With("part", "read-db")); err != nil {
			return err
		}
		defer replica.Close()
	}
	reads := store.NewReads(st, heavy, replica, c.cfg.Reads.pool(), c.log.With("part", "read-db"))

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
	limits := c.cfg.Ingest
	if limits == (ingest.Limits{}) { // a Config not made by DefaultConfig
		limits = ingest.DefaultLimits()
	}
	limits.MaxAge = c.cfg.Retention
	configs := nodeconfig.New(st, c.log.With("part", "nodeconfig"))
	configs.SetPingPeers(c.cfg.PingPeers)
	configs.SetMaxOverrides(c.cfg.MaxOverrides)
	authMode, _ := c.cfg.nodeAuthMode() // checked by Validate
	auth, err := nodeauth.NewAuthenticator(st.Pool(), nodeauth.Options{Mode: authMode, Tenant: c.cfg.Tenant,
		BootstrapTokenFile: c.cfg.BootstrapTokenFile, IdentityMapFile: c.cfg.NodeIdentityMapFile}, c.log.With("part", "nodeauth"))
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	// Off loopback, the warnings cover plaintext streams as well (mtls
	// needs TLS); on loopback only this host reaches the port.
	readyWarnings := c.cfg.nodeAuthWarnings(authMode)
	for _, w := range readyWarnings {
		c.log.Warn(w)
	}
	if authMode == nodeauth.ModeNone && loopbackOnly(c.cfg.GRPCAddr) {
		c.log.Info("node names are not verified (--grpc.node-auth=none): only clients on this host reach the gRPC listen address", "grpc", c.cfg.GRPCAddr)
	}
	ingestSrv := ingest.NewServer(st, writer, ingest.ServerOptions{Limits: limits, Config: configs, Auth: auth, Tenant: c.cfg.Tenant, SendTimeout: c.cfg.SendTimeout, HelloTimeout: c.cfg.HelloTimeout}, c.log.With("part", "ingest"), c.metrics)
	configs.SetPusher(ingestSrv)
	identities := nodeauth.NewAdmin(st, ingestSrv, authMode, c.cfg.Tenant, c.log.With("part", "nodeauth"))

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
	}
	grpcSrv := grpc.NewServer(grpcOpts...)
	nbsv1.RegisterAgentServiceServer(grpcSrv, ingestSrv)

	alerts.SetThresholds(configs)
	accCfg := c.cfg.Access
	accCfg.ExternalURL, accCfg.IndexHTML, accCfg.Tenant = c.cfg.ExternalURL, web.IndexHTML(), c.cfg.Tenant
	acc, err := access.New(st.Pool(), accCfg, c.log.With("part", "access"))
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	if err := c.bootstrapAdmin(ctx, acc, alertCfg.ExternalURL); err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	reports := report.New(reads, st.Pool(), c.log)
	reports.SetLimits(c.cfg.reports())
	admission := readlimit.New(c.cfg.Reads.limits())
	c.metrics.Registry.MustRegister(admission.Collectors()...)
	handler := httpHandler(reads, ingestSrv, configs, api.Parts{NodeConfig: configs, Alerts: alerts, Identities: identities,
		Reports: reports, Admission: admission}, acc, web.Handler(),
		c.log.With("part", "api"), c.metrics, readyWarnings...)
	hl := c.cfg.HTTP
	httpSrv := &http.Server{Handler: handler, ConnContext: access.ConnContext,
		ReadHeaderTimeout: hl.ReadHeaderTimeout, ReadTimeout: hl.ReadTimeout, WriteTimeout: hl.WriteTimeout,
		IdleTimeout: hl.IdleTimeout, MaxHeaderBytes: hl.MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context { return runCtx },
		ErrorLog:    slog.NewLogLogger(c.log.With("part", "http").Handler(), slog.LevelWarn)}
	// Past MaxConns, connections wait in the kernel's backlog: a flood of
	// slow clients cannot exhaust descriptors, and each is closed by the
	// timeouts above.
	httpLis = netutil.LimitListener(httpLis, hl.MaxConns)
	serveHTTP := func() error { return httpSrv.Serve(httpLis) }
	if accCfg.TLSCertFile != "" {
		if httpSrv.TLSConfig, err = tlsfiles.Server(accCfg.TLSCertFile, accCfg.TLSKeyFile, "", c.log.With("part", "http-tls")); err != nil {
			grpcLis.Close()
			httpLis.Close()
			return fmt.Errorf("HTTP TLS: %w", err)
		}
		serveHTTP = func() error { return httpSrv.ServeTLS(httpLis, "", "") }
	} else if accCfg.Mode != access.ModeNone {
		c.log.Warn("the web UI and API are plaintext HTTP: tokens and session cookies cross the network in the clear; set --http.tls-cert-file and --http.tls-key-file, or put a TLS proxy in front, outside a trusted network")
	}
	if accCfg.Mode == access.ModeNone {
		c.log.Warn("--auth.mode=none: everyone who reaches the HTTP port is admin")
	}

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Go(func() { writer.Run(runCtx) })
	wg.Go(func() {
		retention.New(st, identities, c.retentionConfig(), c.log.With("part", "retention")).Run(runCtx, time.Hour)
	})
	wg.Go(func() { c.folder(st).run(runCtx) })
	wg.Go(func() { configs.Listen(runCtx, st.Pool()) })
	wg.Go(func() { identities.Listen(runCtx, st.Pool()) })
	wg.Go(func() { alerts.Run(runCtx) })
	wg.Go(func() {
		if err := grpcSrv.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("serve gRPC: %w", err)
		}
	})
	wg.Go(func() {
		if err := serveHTTP(); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
// from q itself, acc the access routes, and parts the rest of the route
// table; acc guards every one. /readyz lists readyWarnings (unsafe
// settings the collector runs with anyway), which most callers have none of.
func httpHandler(q api.Queries, live api.Live, thresholds api.Thresholds, parts api.Parts, acc *access.Access, ui http.Handler,
	log *slog.Logger, m *telemetry.Metrics, readyWarnings ...string) http.Handler {
	a := api.New(q, live, ui, log, m)
	a.SetThresholds(thresholds)
	a.SetReadyWarnings(readyWarnings)
	parts.Nodes, parts.Access = a, acc
	return a.Handler(api.Routes(parts), acc)
}

// bootstrapAdmin makes the fresh admin token of --auth.bootstrap-admin(-file):
// its secret goes to the file (0600), or into a login URL in the log.
func (c *Collector) bootstrapAdmin(ctx context.Context, acc *access.Access, externalURL string) error {
	cfg := c.cfg.Access
	if !cfg.BootstrapAdmin && cfg.BootstrapAdminFile == "" {
		return nil
	}
	secret, t, err := acc.EnsureBootstrapAdmin(ctx)
	if err != nil {
		return fmt.Errorf("bootstrap admin token: %w", err)
	}
	if cfg.BootstrapAdminFile != "" {
		if err := writeSecret(cfg.BootstrapAdminFile, secret); err != nil {
			return fmt.Errorf("bootstrap admin token: %w", err)
		}
		c.log.Info("bootstrap admin token written", "file", cfg.BootstrapAdminFile, "expires", t.ExpiresAt)
	}
	if cfg.BootstrapAdmin {
		c.log.Warn("bootstrap admin token: open this URL to log in (anyone who reads this log can)", "url", access.LoginURL(externalURL, secret))
	}
	return nil
}

// writeSecret replaces path with a file only its owner can read holding
// secret: written beside it and renamed, so a reader never sees half a
// token, nor a token in a file another user could read.
func writeSecret(path, secret string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // after a successful rename there is nothing left to remove
	// CreateTemp makes the file 0600 already; say so, in case that changes.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// retentionConfig is what the retention passes keep.
func (c *Collector) retentionConfig() retention.Config {
	return retention.Config{Raw: c.cfg.Retention, Rollup1m: c.cfg.RollupRetention1m, Rollup1h: c.cfg.RollupRetention1h,
		Nodes: c.cfg.NodeRetention, Alerts: c.cfg.AlertRetention, Audit: c.cfg.AuditRetention}
}
