// Package app wires the collector's parts together: store, ingest, HTTP.
// It is used by the nbs-collector command and by end-to-end tests alike.
package app

import (
	"context"
	"errors"
	"fmt"
	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/export/otlp"
	"github.com/nbs-project/nbs/collector/export/push"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/connlimit"
	"github.com/nbs-project/nbs/collector/flows"
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
	// httpConns and grpcConns count the listeners' connections, and what
	// their limits refused and closed.
	httpConns, grpcConns *connlimit.Metrics

	mu       sync.Mutex
	grpcAddr net.Addr
	httpAddr net.Addr
	ready    chan struct{}
}

// New prepares a collector; cfg is DefaultConfig with changes, and is
// validated when Run starts.
func New(cfg Config, log *slog.Logger) *Collector {
	c := &Collector{cfg: cfg, log: log, metrics: telemetry.New(), ready: make(chan struct{}),
		httpConns: connlimit.NewMetrics("http"), grpcConns: connlimit.NewMetrics("grpc")}
	c.metrics.Registry.MustRegister(c.httpConns.Collectors()...)
	c.metrics.Registry.MustRegister(c.grpcConns.Collectors()...)
	return c
}

// Ready is closed once both listeners accept connections.
func (c *Collector) Ready() <-chan struct{} { return c.ready }

// Addrs returns the bound addresses (useful with port 0); valid after Ready.
func (c *Collector) Addrs() (grpcAddr, httpAddr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grpcAddr.String(), c.httpAddr.String()
}

// poolShortQueries is the main pool's room beyond its writers and
// registration: the node identity listener's connection and the short
// queries beside them.
const poolShortQueries = 4

// Run serves until ctx ends, then shuts down gracefully.
func (c *Collector) Run(ctx context.Context) error {
	if err := c.cfg.Validate(); err != nil {
		return err
	}
	// The pool holds the writers and the registration (ingest) at once,
	// the node identity listener for good, and the Hello path's short
	// queries (credentials, tenant quotas, ping peers, configs), the folds
	// and alerts beside them. pgx's default, 4 on 2 cores, left those
	// waiting behind the writers' commits one Hello at a time while a
	// fleet registered.
	st, err := store.OpenWithConns(ctx, c.cfg.DBURL, c.log, c.cfg.DBWriters+ingest.DefaultRegistrations+poolShortQueries)
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
	// The servers close the listeners when they stop; until they serve, a
	// collector that fails to start closes them here (closing one a server
	// has closed already does nothing).
	defer grpcLis.Close()
	httpLis, err := net.Listen("tcp", c.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w", c.cfg.HTTPAddr, err)
	}
	defer httpLis.Close()
	c.mu.Lock()
	c.grpcAddr, c.httpAddr = grpcLis.Addr(), httpLis.Addr()
	c.mu.Unlock()

	grpcOpts, err := c.cfg.Ingest.GRPCOptions(c.log.With("part", "tls"))
	if err != nil {
		return err
	}
	p, err := c.wire(ctx, st, reads, httpLis.Addr())
	if err != nil {
		return err
	}
	if c.cfg.PprofAddr != "" {
		_, wait, err := servePprof(ctx, c.cfg.PprofAddr, c.log.With("part", "pprof"))
		if err != nil {
			return err
		}
		defer wait()
	}
	grpcSrv := grpc.NewServer(grpcOpts...)
	nbsv1.RegisterAgentServiceServer(grpcSrv, p.ingest)
	// Agents behind one NAT share an address, so the per-address bound is
	// a fleet's, not a browser's (ingest.Config.MaxConnsPerAddress), and
	// a fleet's servers share their IPv6 /64s, so each address counts; an
	// agent holds one connection, and gRPC has no idle ones to close:
	// a connection without a stream ends after its idle timeout.
	grpcMax, grpcPerAddr := c.cfg.Ingest.Conns()
	grpcLimited := connlimit.New(grpcLis, connlimit.Limits{Max: grpcMax, PerAddress: grpcPerAddr}, c.grpcConns)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	httpSrv, serveHTTP, err := c.httpServer(runCtx, p.handler, httpLis)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Go(func() { p.writer.Run(runCtx) })
	wg.Go(func() {
		retention.New(st, p.identities, c.cfg.Retention, c.log.With("part", "retention")).Run(runCtx, time.Hour)
	})
	wg.Go(func() { c.folder(st).run(runCtx) })
	wg.Go(func() { p.configs.Listen(runCtx, st.Pool()) })
	wg.Go(func() { p.identities.Listen(runCtx, st.Pool()) })
	wg.Go(func() { p.alerts.Run(runCtx) })
	if p.pusher != nil {
		wg.Go(func() { p.pusher.Run(runCtx) })
	}
	wg.Go(func() {
		if err := grpcSrv.Serve(grpcLimited); err != nil {
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

// parts are the collector's parts, wired to each other: what Run serves
// and runs.
type parts struct {
	alerts     *alert.Service
	writer     *ingest.Writer
	configs    *nodeconfig.Service
	ingest     *ingest.Server
	identities *nodeauth.Admin
	// exporter builds the Prometheus export (scrape, pushers).
	exporter *export.Exporter
	// pusher sends the export to the configured receivers; nil without.
	pusher *push.Pusher
	// handler is the whole HTTP side.
	handler http.Handler
}

// wire makes the parts over the store and connects them; httpAddr is
// where the HTTP side listens, for links when no external URL is given.
func (c *Collector) wire(ctx context.Context, st *store.Store, reads *store.Reads, httpAddr net.Addr) (parts, error) {
	var p parts
	alertCfg := c.cfg.Alert
	if alertCfg.ExternalURL = c.cfg.ExternalURL; alertCfg.ExternalURL == "" {
		alertCfg.ExternalURL = alert.DefaultExternalURL(httpAddr.String())
	}
	var err error
	if p.alerts, err = alert.New(st, alertCfg, c.log.With("part", "alert"), c.metrics); err != nil {
		return p, err
	}
	writerOpts := ingest.DefaultWriterOptions()
	writerOpts.Workers, writerOpts.OnStored = c.cfg.DBWriters, p.alerts.OnStored
	p.writer = ingest.NewWriter(st, writerOpts, c.log.With("part", "writer"), c.metrics)
	limits := c.cfg.Ingest.Limits
	if limits == (ingest.Limits{}) { // a Config not made by DefaultConfig
		limits = ingest.DefaultLimits()
	}
	limits.MaxAge = c.cfg.Retention.Raw
	p.configs = nodeconfig.New(st, c.log.With("part", "nodeconfig"))
	p.configs.SetMetrics(c.metrics)
	p.configs.SetPingPeers(c.cfg.NodeConfig.PingPeers)
	p.configs.SetMaxOverrides(c.cfg.NodeConfig.MaxOverrides)
	authMode, _ := c.cfg.nodeAuthMode() // checked by Validate
	auth, err := nodeauth.NewAuthenticator(st.Pool(), nodeauth.Options{Mode: authMode, Tenant: c.cfg.Tenant,
		BootstrapTokenFile: c.cfg.NodeAuth.BootstrapTokenFile, IdentityMapFile: c.cfg.NodeAuth.IdentityMapFile}, c.log.With("part", "nodeauth"))
	if err != nil {
		return p, err
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
	p.ingest = ingest.NewServer(st, p.writer, ingest.ServerOptions{Limits: limits, Config: p.configs, Auth: auth, Tenant: c.cfg.Tenant,
		SendTimeout: c.cfg.Ingest.SendTimeout, HelloTimeout: c.cfg.Ingest.HelloTimeout, Quotas: st}, c.log.With("part", "ingest"), c.metrics)
	p.configs.SetPusher(p.ingest)
	p.identities = nodeauth.NewAdmin(st, p.ingest, authMode, c.cfg.Tenant, c.log.With("part", "nodeauth"))
	p.alerts.SetThresholds(p.configs)

	accCfg := c.cfg.Access
	accCfg.ExternalURL, accCfg.IndexHTML, accCfg.Tenant = c.cfg.ExternalURL, web.IndexHTML(), c.cfg.Tenant
	acc, err := access.New(st.Pool(), accCfg, c.log.With("part", "access"))
	if err != nil {
		return p, err
	}
	if err := c.bootstrapAdmin(ctx, acc, alertCfg.ExternalURL); err != nil {
		return p, err
	}
	reports := report.New(reads, st.Pool(), c.log)
	reports.SetLimits(c.cfg.reports())
	admission := readlimit.New(c.cfg.Reads.limits())
	c.metrics.Registry.MustRegister(admission.Collectors()...)
	exportCfg := c.cfg.Export
	if exportCfg == (export.Config{}) { // a Config not made by DefaultConfig
		exportCfg = export.DefaultConfig()
	}
	p.exporter = export.New(reads, exportCfg)
	if c.cfg.Push.Configured() {
		rs, err := c.cfg.Push.LoadReceivers()
		if err != nil {
			return p, err
		}
		senders := push.DefaultSenders()
		senders["otlp"] = otlp.New
		if p.pusher, err = push.New(st.Pool(), p.exporter, c.cfg.Push, rs, senders, c.metrics.Registry, c.log.With("part", "push")); err != nil {
			return p, err
		}
		p.exporter.SetReceivers(p.pusher.Status)
	}
	p.handler = httpHandler(reads, p.ingest, p.configs, api.Parts{NodeConfig: p.configs, Alerts: p.alerts, Identities: p.identities,
		Reports: reports, Export: export.NewHandler(p.exporter, c.metrics), Flows: flows.New(reads, c.log.With("part", "flows")), Admission: admission}, acc, web.Handler(),
		c.log.With("part", "api"), c.metrics, handlerOptions{readyWarnings: readyWarnings, counterpartLabel: c.cfg.CounterpartLabel})
	return p, nil
}

// httpServer is the HTTP server of handler, bounded by --http.* and
// serving HTTPS with --http.tls-*, and how to serve it on lis.
func (c *Collector) httpServer(runCtx context.Context, handler http.Handler, lis net.Listener) (*http.Server, func() error, error) {
	hl, accCfg := c.cfg.HTTP, c.cfg.Access
	srv := &http.Server{Handler: handler, ConnContext: access.ConnContext,
		ReadHeaderTimeout: hl.ReadHeaderTimeout, ReadTimeout: hl.ReadTimeout, WriteTimeout: hl.WriteTimeout,
		IdleTimeout: hl.IdleTimeout, MaxHeaderBytes: hl.MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context { return runCtx },
		ErrorLog:    slog.NewLogLogger(c.log.With("part", "http").Handler(), slog.LevelWarn)}
	// Past MaxConns, idle connections make room (least recently used
	// first), else new ones wait in the kernel's backlog: a flood of slow
	// clients cannot exhaust descriptors, and each is closed by the
	// timeouts above (a TLS handshake too: net/http bounds it by the
	// shortest of them). One address holds at most MaxConnsPerAddress, but
	// for the proxies that carry everyone's requests.
	proxies := slices.Concat(accCfg.TrustedProxies, accCfg.ProxyCIDRs)
	limited := connlimit.New(lis, connlimit.Limits{Max: hl.MaxConns, PerAddress: hl.MaxConnsPerAddress, IPv6Bits: 64,
		Exempt: proxies.Contains, States: true}, c.httpConns)
	srv.ConnState = limited.ConnState
	lis = limited
	serve := func() error { return srv.Serve(lis) }
	if accCfg.TLSCertFile != "" {
		var err error
		if srv.TLSConfig, err = tlsfiles.Server(accCfg.TLSCertFile, accCfg.TLSKeyFile, "", c.log.With("part", "http-tls")); err != nil {
			return nil, nil, fmt.Errorf("HTTP TLS: %w", err)
		}
		serve = func() error { return srv.ServeTLS(lis, "", "") }
	} else if accCfg.Mode != access.ModeNone {
		c.log.Warn("the web UI and API are plaintext HTTP: tokens and session cookies cross the network in the clear; set --http.tls-cert-file and --http.tls-key-file, or put a TLS proxy in front, outside a trusted network")
	}
	if accCfg.Mode == access.ModeNone {
		c.log.Warn("--auth.mode=none: everyone who reaches the HTTP port is admin")
	}
	return srv, serve, nil
}

// handlerOptions are the HTTP surface's settings most callers leave zero.
type handlerOptions struct {
	// readyWarnings are unsafe settings the collector runs with anyway,
	// listed by /readyz.
	readyWarnings []string
	// counterpartLabel narrows counterparts to nodes sharing its value
	// (--counterparts.label).
	counterpartLabel string
}

// httpHandler is the whole HTTP surface: the API answers the node routes
// from q itself, acc the access routes, and parts the rest of the route
// table; acc guards every one.
func httpHandler(q api.Queries, live api.Live, thresholds api.Thresholds, parts api.Parts, acc *access.Access, ui http.Handler,
	log *slog.Logger, m *telemetry.Metrics, opts handlerOptions) http.Handler {
	a := api.New(q, live, ui, log, m)
	a.SetThresholds(thresholds)
	a.SetReadyWarnings(opts.readyWarnings)
	a.SetCounterpartLabel(opts.counterpartLabel)
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
