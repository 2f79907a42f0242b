// Package app wires the collector's parts together: store, ingest, HTTP.
// It is used by the nbs-collector command and by end-to-end tests alike.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
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

type Config struct {
	GRPCAddr   string
	HTTPAddr   string
	DBURL      string
	Retention  time.Duration
	DBWriters  int
	MaxMsgSize int
	// Window bounds what one stream may have in flight: with gRPC's default
	// auto-tuned windows a collector buffered ~2 GB when Postgres fell behind.
	StreamWindow int32
	// PingPeers is how many fleet peers each node is told to ping
	// (0: the default 8; negative: no ping mesh).
	PingPeers int
	// ExternalURL is where people reach this NBS, for links in alerts.
	ExternalURL string
	Alert       alert.Config
	// TLS for agent streams; with GRPCClientCA, agents must present a
	// certificate it signed (mutual TLS).
	GRPCTLSCert  string
	GRPCTLSKey   string
	GRPCClientCA string
	// NodeAuth is how node names in Hellos are verified: none, enroll or
	// mtls ("": mtls with GRPCClientCA, enroll with BootstrapTokenFile,
	// else none).
	NodeAuth string
	// BootstrapTokenFile holds the fleet token that enrolls new nodes.
	BootstrapTokenFile string
	// NodeIdentityMapFile lets certificate identities report as other
	// node names (mtls).
	NodeIdentityMapFile string
}

// RegisterFlags binds the configuration to command-line flags with defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc.listen-address", ":7701", "address for agent streams (gRPC)")
	fs.StringVar(&c.HTTPAddr, "http.listen-address", ":7700", "address for the web UI, JSON API, /metrics and health")
	fs.StringVar(&c.GRPCTLSCert, "grpc.tls-cert-file", "", "PEM certificate for agent streams (TLS); without it the stream is plaintext")
	fs.StringVar(&c.GRPCTLSKey, "grpc.tls-key-file", "", "PEM private key of --grpc.tls-cert-file")
	fs.StringVar(&c.GRPCClientCA, "grpc.tls-client-ca-file", "", "PEM CA that must have signed every agent's client certificate (mutual TLS)")
	fs.StringVar(&c.NodeAuth, "grpc.node-auth", "", "how node names are verified: none (any client may report as any node), enroll (a name is bound to the credential issued at its first Hello with the bootstrap token, or by an operator), mtls (the client certificate's DNS SAN or CN must be the name) (default: mtls with --grpc.tls-client-ca-file, enroll with --grpc.bootstrap-token-file, else none)")
	fs.StringVar(&c.BootstrapTokenFile, "grpc.bootstrap-token-file", "", "file holding the fleet bootstrap token (32-512 characters, e.g. openssl rand -base64 48): a node without a credential presents it once to enroll its name")
	fs.StringVar(&c.NodeIdentityMapFile, "grpc.node-identity-map-file", "", "with mtls: lines of 'certificate-identity node-name-or-glob...' letting a certificate report as other names; re-read when it changes")
	fs.StringVar(&c.DBURL, "db.url", os.Getenv("NBS_DB_URL"), "PostgreSQL URL (env NBS_DB_URL), e.g. postgres://nbs@db:5432/nbs")
	fs.DurationVar(&c.Retention, "retention", 30*24*time.Hour, "how long reports are kept; older day partitions are dropped")
	fs.IntVar(&c.DBWriters, "db.writers", 2, "concurrent database writers (about one per database core)")
	fs.IntVar(&c.MaxMsgSize, "grpc.max-message-bytes", 4<<20, "largest message an agent may send")
	fs.IntVar(&c.PingPeers, "ping.peers", nodeconfig.DefaultPingPeers, "fleet peers each node pings and is pinged by, drawn deterministically from the nodes that announce a ping address (-1: no ping mesh)")
	c.StreamWindow = 64 << 10
	fs.StringVar(&c.ExternalURL, "web.external-url", "", "URL people use to reach this NBS, for links in alerts (default http://<http.listen-address>)")
	c.Alert.RegisterFlags(fs)
}

func (c *Config) Validate() error {
	var errs []error
	if c.DBURL == "" {
		errs = append(errs, errors.New("--db.url (or env NBS_DB_URL) is required"))
	}
	if (c.GRPCTLSCert == "") != (c.GRPCTLSKey == "") {
		errs = append(errs, errors.New("--grpc.tls-cert-file and --grpc.tls-key-file go together"))
	}
	if c.GRPCClientCA != "" && c.GRPCTLSCert == "" {
		errs = append(errs, errors.New("--grpc.tls-client-ca-file needs --grpc.tls-cert-file and --grpc.tls-key-file"))
	}
	if _, err := c.nodeAuthMode(); err != nil {
		errs = append(errs, err)
	}
	if c.Retention < 24*time.Hour {
		errs = append(errs, fmt.Errorf("--retention %s is shorter than one day partition", c.Retention))
	}
	if c.PingPeers > 1000 {
		errs = append(errs, fmt.Errorf("--ping.peers %d is more than 1000", c.PingPeers))
	}
	if c.DBWriters < 1 || c.DBWriters > 64 {
		errs = append(errs, fmt.Errorf("--db.writers %d must be from 1 to 64", c.DBWriters))
	}
	if c.MaxMsgSize < 64<<10 || c.MaxMsgSize > 64<<20 {
		errs = append(errs, fmt.Errorf("--grpc.max-message-bytes %d must be from 64 KiB to 64 MiB", c.MaxMsgSize))
	}
	errs = append(errs, alert.ValidateExternalURL(c.ExternalURL), c.Alert.Validate())
	return errors.Join(errs...)
}

// nodeAuthMode resolves --grpc.node-auth and checks it has what it needs.
func (c *Config) nodeAuthMode() (nodeauth.Mode, error) {
	mode := nodeauth.ModeNone
	switch {
	case c.NodeAuth != "":
		m, err := nodeauth.ParseMode(c.NodeAuth)
		if err != nil {
			return "", fmt.Errorf("--grpc.node-auth %w", err)
		}
		mode = m
	case c.GRPCClientCA != "" && c.BootstrapTokenFile != "":
		return "", errors.New("--grpc.tls-client-ca-file and --grpc.bootstrap-token-file: choose how node names are verified with --grpc.node-auth=mtls or enroll")
	case c.GRPCClientCA != "":
		mode = nodeauth.ModeMTLS
	case c.BootstrapTokenFile != "":
		mode = nodeauth.ModeEnroll
	}
	var errs []error
	if mode == nodeauth.ModeMTLS && c.GRPCClientCA == "" {
		errs = append(errs, errors.New("--grpc.node-auth=mtls needs --grpc.tls-client-ca-file (and the server certificate)"))
	}
	if c.BootstrapTokenFile != "" && mode != nodeauth.ModeEnroll {
		errs = append(errs, fmt.Errorf("--grpc.bootstrap-token-file is for --grpc.node-auth=enroll, not %s", mode))
	}
	if c.NodeIdentityMapFile != "" && mode != nodeauth.ModeMTLS {
		errs = append(errs, fmt.Errorf("--grpc.node-identity-map-file is for --grpc.node-auth=mtls, not %s", mode))
	}
	return mode, errors.Join(errs...)
}

type Collector struct {
	cfg     Config
	log     *slog.Logger
	metrics *telemetry.Metrics

	mu       sync.Mutex
	grpcAddr net.Addr
	httpAddr net.Addr
	ready    chan struct{}
}

func New(cfg Config, log *slog.Logger) *Collector {
	if cfg.StreamWindow == 0 {
		cfg.StreamWindow = 64 << 10
	}
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = 4 << 20
	}
	if cfg.DBWriters == 0 {
		cfg.DBWriters = 2
	}
	if cfg.Retention == 0 {
		cfg.Retention = 30 * 24 * time.Hour
	}
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
	alerts, err := alert.New(st, alertCfg, c.log.With("part", "alert"))
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	writer := ingest.NewWriter(st, ingest.WriterOptions{Workers: c.cfg.DBWriters, OnStored: alerts.OnStored}, c.log.With("part", "writer"), c.metrics)
	limits := ingest.DefaultLimits()
	limits.MaxAge = c.cfg.Retention
	configs := nodeconfig.New(st, c.log.With("part", "nodeconfig"))
	if c.cfg.PingPeers != 0 {
		configs.SetPingPeers(c.cfg.PingPeers)
	}
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

	httpAPI := api.New(st, ingestSrv, web.Handler(), c.log.With("part", "api"), c.metrics)
	httpAPI.SetThresholds(configs)
	httpAPI.Mount(configs.Routes)
	alerts.SetThresholds(configs)
	httpAPI.Mount(alerts.Routes)
	httpAPI.Mount(identities.Routes)
	httpSrv := &http.Server{Handler: httpAPI.Handler(), ReadHeaderTimeout: 10 * time.Second,
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
