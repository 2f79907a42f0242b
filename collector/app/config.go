package app

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/nodeconfig"
	"github.com/nbs-project/nbs/collector/readlimit"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/tenant"
	"github.com/nbs-project/nbs/internal/wire"
)

// Config is the collector's configuration. Start from DefaultConfig: the
// command binds it to flags, tests change what they need.
type Config struct {
	GRPCAddr string
	HTTPAddr string
	DBURL    string
	// DBReadURL, when set, serves the heavy reads (series, histograms,
	// events, reports) from a replica such as a streaming standby
	// (store.Reads); the primary's read pool answers them while it cannot
	// be reached, and without it.
	DBReadURL string
	Retention time.Duration
	// RollupRetention1m and RollupRetention1h keep the report rollups
	// (collector/store) apart from raw reports: minute rollups serve
	// incidents and short reports, hour rollups long ones.
	RollupRetention1m time.Duration
	RollupRetention1h time.Duration
	DBWriters         int
	MaxMsgSize        int
	// StreamWindow bounds what one stream may have in flight: with gRPC's
	// default auto-tuned windows a collector buffered ~2 GB when Postgres
	// fell behind.
	StreamWindow int32
	// HTTP bounds what one HTTP client may hold (--http.*-timeout,
	// --http.max-header-bytes, --http.max-connections).
	HTTP HTTPLimits
	// Reads bounds the heavy reads (reports, series, evidence): their own
	// database pool and statement timeout, and the slots one caller and
	// all callers may hold (--reads.*).
	Reads ReadLimits
	// SendTimeout ends an agent stream whose agent has not read one message
	// for this long, so it holds no more than its pending Config.
	SendTimeout time.Duration
	// MaxOverrides caps the stored threshold overrides.
	MaxOverrides int
	// Ingest bounds what one agent, or all of them, may hold or send
	// (--ingest.*); MaxAge follows Retention.
	Ingest ingest.Limits
	// HelloTimeout is how long a new stream may take to send its Hello.
	HelloTimeout time.Duration
	// PingPeers is how many fleet peers each node is told to ping
	// (0 or less: no ping mesh).
	PingPeers int
	// ExternalURL is where people reach this NBS, for links in alerts
	// ("": http://<HTTPAddr>).
	ExternalURL string
	Alert       alert.Config
	// TLS for agent streams; with GRPCClientCA, agents must present a
	// certificate it signed (mutual TLS).
	GRPCTLSCert  string
	GRPCTLSKey   string
	GRPCClientCA string
	// NodeAuth is how node names in Hellos are verified: none, enroll or
	// mtls ("": mtls with GRPCClientCA, enroll with BootstrapTokenFile,
	// else none, which a GRPCAddr other hosts can reach refuses).
	NodeAuth string
	// BootstrapTokenFile holds the fleet token that enrolls new nodes.
	BootstrapTokenFile string
	// NodeIdentityMapFile lets certificate identities report as other
	// node names (mtls).
	NodeIdentityMapFile string
	// Tenant is the label key naming a node's tenant (--tenant.label):
	// bound server-side, and never crossed by customer tokens, the ping
	// mesh, counterparts, reports or alerts.
	Tenant tenant.Key
	// Access is who may use the HTTP side: tokens, roles, the login page,
	// browser protections, HTTP TLS (--auth.*, --web.allowed-hosts,
	// --http.tls-*, --metrics.auth).
	Access access.Config
	// Reports bounds the saved report definitions (--reports.*); the zero
	// value is report.DefaultConfig.
	Reports report.Config

	// NodeRetention, AlertRetention and AuditRetention bound the rest
	// (collector/retention): nodes that stopped reporting, resolved
	// alerts, the audit log.
	NodeRetention  time.Duration
	AlertRetention time.Duration
	AuditRetention time.Duration
}

// HTTPLimits are the HTTP server's timeouts and connection bounds.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration
	// ReadTimeout covers the whole request, body included (bodies are at
	// most 1 MiB).
	ReadTimeout time.Duration
	// WriteTimeout covers reading the request and writing the answer: the
	// largest (a year-long series, a node's whole tree) take seconds.
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
	// MaxConns bounds the open connections; more wait to be accepted.
	MaxConns int
}

// ReadLimits keep heavy reads (reports, series, evidence) from slowing
// anyone else: they run on their own database pool (the writers and token
// checks keep the primary's), PoolSize reports' worth at a time (the rest
// wait their turn), each statement cancelled by the server past
// StatementTimeout; a caller past its slots, or every caller past all of
// them, is answered 429.
type ReadLimits struct {
	// PoolSize is the read pool's connections (on the primary, and on
	// --db.read-url), and how many reports run at once: the cores heavy
	// reads may take from ingest, in the database and in the collector.
	PoolSize         int
	StatementTimeout time.Duration
	// MaxConcurrent and MaxPerCaller count slots, running or waiting: a
	// report takes api.ReportSlots, a series or a page of evidence one.
	MaxConcurrent int
	MaxPerCaller  int
}

// DefaultReadLimits are the production bounds of heavy reads. The pool is
// half the collector's cores: on 2 cores, one report computing kept the
// agents' ack p99 within 1.3× of its baseline, two side by side took both
// cores and tripled it (BENCHMARKS.md, "One customer's reports"). Eight
// slots a caller are two reports (one running, one waiting its turn), or
// the six charts and evidence a node's page asks for at once.
func DefaultReadLimits() ReadLimits {
	return ReadLimits{PoolSize: max(1, runtime.GOMAXPROCS(0)/2), StatementTimeout: 30 * time.Second, MaxConcurrent: 32, MaxPerCaller: 8}
}

// pool is the store's view of the limits.
func (r ReadLimits) pool() store.ReadPool {
	return store.ReadPool{Size: int32(r.PoolSize), StatementTimeout: r.StatementTimeout}
}

// limits is the admission's view of the limits: PoolSize reports run at
// once, and a read waits for its turn no longer than one statement may
// take.
func (r ReadLimits) limits() readlimit.Limits {
	return readlimit.Limits{MaxConcurrent: r.MaxConcurrent, MaxPerCaller: r.MaxPerCaller,
		Running: r.PoolSize * api.ReportSlots, MaxWait: r.StatementTimeout}
}

func (r ReadLimits) validate(writeTimeout time.Duration) error {
	var errs []error
	if r.PoolSize < 1 || r.PoolSize > 64 {
		errs = append(errs, fmt.Errorf("--reads.pool-size %d must be from 1 to 64", r.PoolSize))
	}
	if r.StatementTimeout < time.Second || r.StatementTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--reads.statement-timeout %s must be from 1s to 10m", r.StatementTimeout))
	} else if r.StatementTimeout > writeTimeout && writeTimeout >= time.Second { // a write timeout out of its own bounds is reported already
		// An answer read for longer could no longer be written.
		errs = append(errs, fmt.Errorf("--reads.statement-timeout %s is longer than --http.write-timeout %s", r.StatementTimeout, writeTimeout))
	}
	if r.MaxPerCaller < api.ReportSlots || r.MaxPerCaller > 1024 {
		errs = append(errs, fmt.Errorf("--reads.max-per-caller %d must be from %d (one report) to 1024", r.MaxPerCaller, api.ReportSlots))
	}
	if r.MaxConcurrent < max(r.MaxPerCaller, api.ReportSlots) || r.MaxConcurrent > 4096 {
		errs = append(errs, fmt.Errorf("--reads.max-concurrent %d must be from --reads.max-per-caller (%d) to 4096", r.MaxConcurrent, r.MaxPerCaller))
	}
	return errors.Join(errs...)
}

// DefaultHTTPLimits are the production HTTP bounds.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		MaxConns:          1024,
	}
}

// DefaultConfig is the production configuration, but for the database,
// which has no default.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:  ":7701",
		HTTPAddr:  ":7700",
		Retention: 30 * 24 * time.Hour,
		// Minute rollups cover the longest raw period a report may ask
		// minute detail of; hour rollups cover a report's maximum (400 days)
		// and its previous period.
		RollupRetention1m: 90 * 24 * time.Hour,
		RollupRetention1h: 800 * 24 * time.Hour,
		DBWriters:         ingest.DefaultWriterOptions().Workers,
		MaxMsgSize:        wire.MaxMessageBytes,
		StreamWindow:      64 << 10,
		HTTP:              DefaultHTTPLimits(),
		Reads:             DefaultReadLimits(),
		SendTimeout:       ingest.DefaultSendTimeout,
		MaxOverrides:      nodeconfig.DefaultMaxOverrides,
		Ingest:            ingest.DefaultLimits(),
		HelloTimeout:      ingest.DefaultHelloTimeout,
		PingPeers:         nodeconfig.DefaultPingPeers,
		Tenant:            tenant.DefaultKey,
		Alert:             alert.DefaultConfig(),
		Access:            access.DefaultConfig(),
		Reports:           report.DefaultConfig(),

		// A node silent as long as raw data is kept has nothing left to
		// show but rollups; kept longer, churned Kubernetes nodes pile up
		// against --ingest.max-nodes.
		NodeRetention:  30 * 24 * time.Hour,
		AlertRetention: 90 * 24 * time.Hour,
		AuditRetention: 400 * 24 * time.Hour,
	}
}

// RegisterFlags binds the configuration to command-line flags, with the
// values already in c (DefaultConfig's, usually) as their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc.listen-address", c.GRPCAddr, "address for agent streams (gRPC)")
	fs.StringVar(&c.HTTPAddr, "http.listen-address", c.HTTPAddr, "address for the web UI, JSON API, /metrics and health")
	fs.StringVar(&c.GRPCTLSCert, "grpc.tls-cert-file", c.GRPCTLSCert, "PEM certificate for agent streams (TLS); without it the stream is plaintext")
	fs.StringVar(&c.GRPCTLSKey, "grpc.tls-key-file", c.GRPCTLSKey, "PEM private key of --grpc.tls-cert-file")
	fs.StringVar(&c.GRPCClientCA, "grpc.tls-client-ca-file", c.GRPCClientCA, "PEM CA that must have signed every agent's client certificate (mutual TLS)")
	fs.StringVar(&c.NodeAuth, "grpc.node-auth", c.NodeAuth, "how node names are verified: none (any client may report as any node), enroll (a name is bound to the credential issued at its first Hello with the bootstrap token, or by an operator), mtls (the client certificate's DNS SAN or CN must be the name) (default: mtls with --grpc.tls-client-ca-file, enroll with --grpc.bootstrap-token-file, else none on a loopback --grpc.listen-address; any other address needs one of them or this flag)")
	fs.StringVar(&c.BootstrapTokenFile, "grpc.bootstrap-token-file", c.BootstrapTokenFile, "file holding the fleet bootstrap token (32-512 characters, e.g. openssl rand -base64 48): a node without a credential presents it once to enroll its name")
	fs.StringVar(&c.NodeIdentityMapFile, "grpc.node-identity-map-file", c.NodeIdentityMapFile, "with mtls: lines of 'certificate-identity node-name-or-glob... [label=value...]' letting a certificate report as other names, with labels (the tenant) bound to them; re-read when it changes")
	c.Tenant.RegisterFlag(fs)
	fs.StringVar(&c.DBURL, "db.url", c.DBURL, "PostgreSQL URL (env NBS_DB_URL), e.g. postgres://nbs@db:5432/nbs")
	fs.StringVar(&c.DBReadURL, "db.read-url", c.DBReadURL, "PostgreSQL URL of a read-only replica (env NBS_DB_READ_URL), e.g. a streaming standby: series, events and reports are read there, and from --db.url's read pool while it cannot be reached (default: everything from --db.url)")
	fs.DurationVar(&c.Retention, "retention", c.Retention, "how long reports are kept; older day partitions are dropped")
	fs.DurationVar(&c.RollupRetention1m, "retention.rollup-1m", c.RollupRetention1m, "how long the 1-minute report rollups are kept (incidents, reports up to 2 days)")
	fs.DurationVar(&c.RollupRetention1h, "retention.rollup-1h", c.RollupRetention1h, "how long the 1-hour and 1-day report rollups are kept (longer reports and their previous periods)")
	fs.DurationVar(&c.NodeRetention, "retention.nodes", c.NodeRetention, "a node that has not reported for this long is deleted with all its data, rollups included, and its credential (a running agent registers again)")
	fs.DurationVar(&c.AlertRetention, "retention.alerts", c.AlertRetention, "how long resolved alerts and their delivery log are kept")
	fs.DurationVar(&c.AuditRetention, "retention.audit", c.AuditRetention, "how long the audit log is kept")
	fs.IntVar(&c.DBWriters, "db.writers", c.DBWriters, "concurrent database writers (about one per database core)")
	fs.IntVar(&c.MaxMsgSize, "grpc.max-message-bytes", c.MaxMsgSize, "largest message an agent may send")
	fs.DurationVar(&c.HTTP.ReadHeaderTimeout, "http.read-header-timeout", c.HTTP.ReadHeaderTimeout, "how long a client may take to send a request's headers")
	fs.DurationVar(&c.HTTP.ReadTimeout, "http.read-timeout", c.HTTP.ReadTimeout, "how long a client may take to send a whole request, body included")
	fs.DurationVar(&c.HTTP.WriteTimeout, "http.write-timeout", c.HTTP.WriteTimeout, "how long reading a request and writing its answer may take (the largest answers, a year of a series or a whole tree, take seconds)")
	fs.DurationVar(&c.HTTP.IdleTimeout, "http.idle-timeout", c.HTTP.IdleTimeout, "how long a kept-alive connection may wait for its next request")
	fs.IntVar(&c.HTTP.MaxHeaderBytes, "http.max-header-bytes", c.HTTP.MaxHeaderBytes, "largest request line and headers, in bytes (more: 431)")
	fs.IntVar(&c.HTTP.MaxConns, "http.max-connections", c.HTTP.MaxConns, "most open HTTP connections; more wait to be accepted")
	fs.IntVar(&c.Reads.PoolSize, "reads.pool-size", c.Reads.PoolSize, "database connections of heavy reads (reports, series, evidence), apart from the writers' and token checks' (on --db.url, and on --db.read-url each), and how many reports run at once (more wait their turn): the cores heavy reads may take from ingest; 1 to 64 (default: half the collector's CPUs, at least 1)")
	fs.DurationVar(&c.Reads.StatementTimeout, "reads.statement-timeout", c.Reads.StatementTimeout, "PostgreSQL cancels a heavy read's statement that runs longer (the request answers 504, timeout); 1s to 10m, at most --http.write-timeout")
	fs.IntVar(&c.Reads.MaxConcurrent, "reads.max-concurrent", c.Reads.MaxConcurrent, "heavy-read slots all callers together may hold (a report takes 4, a series or a page of evidence 1); past it: 429 with Retry-After")
	fs.IntVar(&c.Reads.MaxPerCaller, "reads.max-per-caller", c.Reads.MaxPerCaller, "heavy-read slots one caller (a token and its sessions, a proxy user) may hold; past it: 429 with Retry-After; 4 (one report) to 1024")
	fs.DurationVar(&c.SendTimeout, "grpc.send-timeout", c.SendTimeout, "an agent that reads nothing from its stream for this long is disconnected (it reconnects and gets the newest config)")
	fs.IntVar(&c.MaxOverrides, "thresholds.max-overrides", c.MaxOverrides, "most threshold overrides that may be stored")
	fs.IntVar(&c.Ingest.MaxStreams, "ingest.max-streams", c.Ingest.MaxStreams, "concurrent agent streams on this collector, with a Hello or not; more are refused with ResourceExhausted")
	fs.IntVar(&c.Ingest.MaxStreamsPerIP, "ingest.max-streams-per-address", c.Ingest.MaxStreamsPerIP, "concurrent agent streams from one source IP address")
	fs.DurationVar(&c.HelloTimeout, "ingest.hello-timeout", c.HelloTimeout, "how long a new stream may take to send its Hello")
	fs.IntVar(&c.Ingest.MaxNodes, "ingest.max-nodes", c.Ingest.MaxNodes, "registered nodes; a Hello from a new node beyond it is refused (delete unused nodes with nbs-collector nodes delete)")
	fs.IntVar(&c.Ingest.MaxMetrics, "ingest.max-metrics-per-node", c.Ingest.MaxMetrics, "metric definitions per node, counted across all its Hellos and streams")
	fs.IntVar(&c.Ingest.MaxCapabilities, "ingest.max-capabilities", c.Ingest.MaxCapabilities, "capabilities per Hello")
	fs.IntVar(&c.Ingest.MaxSamples, "ingest.max-samples", c.Ingest.MaxSamples, "samples per report")
	fs.IntVar(&c.Ingest.MaxHistograms, "ingest.max-histograms", c.Ingest.MaxHistograms, "histograms per report")
	fs.IntVar(&c.Ingest.MaxEvents, "ingest.max-events", c.Ingest.MaxEvents, "events per report")
	fs.DurationVar(&c.Ingest.MaxFutureSkew, "ingest.max-future-skew", c.Ingest.MaxFutureSkew, "how far ahead of the collector's clock a report may be dated (what it may move is clamped to the collector's clock anyway)")
	fs.IntVar(&c.PingPeers, "ping.peers", c.PingPeers, "fleet peers each node pings and is pinged by, drawn deterministically from the nodes that announce a ping address (0: no ping mesh)")
	fs.StringVar(&c.ExternalURL, "web.external-url", c.ExternalURL, "URL people use to reach this NBS, for links in alerts (default http://<http.listen-address>)")
	c.Alert.RegisterFlags(fs)
	c.Access.RegisterFlags(fs)
	c.Reports.RegisterFlags(fs)
}

// reports is the report limits in force: a Config not made by
// DefaultConfig has the defaults.
func (c *Config) reports() report.Config {
	if c.Reports == (report.Config{}) {
		return report.DefaultConfig()
	}
	return c.Reports
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.DBURL == "" {
		errs = append(errs, errors.New("--db.url (or env NBS_DB_URL) is required"))
	}
	if c.DBReadURL != "" {
		if _, err := pgconn.ParseConfig(c.DBReadURL); err != nil {
			// Not err itself: it repeats the URL, which may hold a password.
			errs = append(errs, errors.New("--db.read-url (or env NBS_DB_READ_URL) is not a PostgreSQL URL or connection string"))
		}
	}
	if c.GRPCAddr == "" {
		errs = append(errs, errors.New("--grpc.listen-address is required"))
	}
	if c.HTTPAddr == "" {
		errs = append(errs, errors.New("--http.listen-address is required"))
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
	if err := c.Tenant.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Retention < 24*time.Hour {
		errs = append(errs, fmt.Errorf("--retention %s is shorter than one day partition", c.Retention))
	}
	errs = append(errs, c.HTTP.validate(), c.Reads.validate(c.HTTP.WriteTimeout))
	if c.SendTimeout < time.Second || c.SendTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("--grpc.send-timeout %s must be from 1s to 1h", c.SendTimeout))
	}
	if c.MaxOverrides < 1 || c.MaxOverrides > 1_000_000 {
		errs = append(errs, fmt.Errorf("--thresholds.max-overrides %d must be from 1 to 1000000", c.MaxOverrides))
	}
	if c.RollupRetention1m < time.Hour {
		errs = append(errs, fmt.Errorf("--retention.rollup-1m %s is shorter than an hour", c.RollupRetention1m))
	}
	if c.RollupRetention1h < 24*time.Hour {
		errs = append(errs, fmt.Errorf("--retention.rollup-1h %s is shorter than a day", c.RollupRetention1h))
	}
	for _, r := range []struct {
		flag string
		v    time.Duration
	}{{"--retention.nodes", c.NodeRetention}, {"--retention.alerts", c.AlertRetention}, {"--retention.audit", c.AuditRetention}} {
		if r.v < 24*time.Hour || r.v > 100*365*24*time.Hour {
			errs = append(errs, fmt.Errorf("%s %s must be from 1 day to 100 years", r.flag, r.v))
		}
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
	for _, l := range []struct {
		flag   string
		v, max int
	}{
		{"--ingest.max-streams", c.Ingest.MaxStreams, 1 << 20}, {"--ingest.max-streams-per-address", c.Ingest.MaxStreamsPerIP, 1 << 20},
		{"--ingest.max-nodes", c.Ingest.MaxNodes, 1 << 24}, {"--ingest.max-metrics-per-node", c.Ingest.MaxMetrics, 1 << 20},
		{"--ingest.max-capabilities", c.Ingest.MaxCapabilities, 1 << 16}, {"--ingest.max-samples", c.Ingest.MaxSamples, 1 << 20},
		{"--ingest.max-histograms", c.Ingest.MaxHistograms, 1 << 20}, {"--ingest.max-events", c.Ingest.MaxEvents, 1 << 20},
	} {
		if l.v < 1 || l.v > l.max {
			errs = append(errs, fmt.Errorf("%s %d must be from 1 to %d", l.flag, l.v, l.max))
		}
	}
	if c.HelloTimeout < time.Second || c.HelloTimeout > 5*time.Minute {
		errs = append(errs, fmt.Errorf("--ingest.hello-timeout %s must be from 1s to 5m", c.HelloTimeout))
	}
	if c.Ingest.MaxFutureSkew < 0 || c.Ingest.MaxFutureSkew > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--ingest.max-future-skew %s must be from 0 to 24h", c.Ingest.MaxFutureSkew))
	}
	// gRPC ignores windows below 64 KiB.
	if c.StreamWindow < 64<<10 || c.StreamWindow > 16<<20 {
		errs = append(errs, fmt.Errorf("stream window %d must be from 64 KiB to 16 MiB", c.StreamWindow))
	}
	errs = append(errs, alert.ValidateExternalURL(c.ExternalURL), c.Alert.Validate(), c.Access.Validate(), c.reports().Validate())
	return errors.Join(errs...)
}

func (h HTTPLimits) validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--http.read-header-timeout", h.ReadHeaderTimeout}, {"--http.read-timeout", h.ReadTimeout},
		{"--http.write-timeout", h.WriteTimeout}, {"--http.idle-timeout", h.IdleTimeout},
	} {
		// Zero would mean no timeout at all to net/http.
		if d.v < time.Second || d.v > 24*time.Hour {
			errs = append(errs, fmt.Errorf("%s %s must be from 1s to 24h", d.flag, d.v))
		}
	}
	if h.ReadHeaderTimeout > h.ReadTimeout {
		errs = append(errs, fmt.Errorf("--http.read-header-timeout %s is longer than --http.read-timeout %s", h.ReadHeaderTimeout, h.ReadTimeout))
	}
	if h.ReadTimeout > h.WriteTimeout {
		// The write timeout runs from the end of the headers: an answer
		// must have time after the longest request.
		errs = append(errs, fmt.Errorf("--http.read-timeout %s is longer than --http.write-timeout %s", h.ReadTimeout, h.WriteTimeout))
	}
	if h.MaxHeaderBytes < 4<<10 || h.MaxHeaderBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("--http.max-header-bytes %d must be from 4 KiB to 1 MiB", h.MaxHeaderBytes))
	}
	if h.MaxConns < 16 || h.MaxConns > 1_000_000 {
		errs = append(errs, fmt.Errorf("--http.max-connections %d must be from 16 to 1000000", h.MaxConns))
	}
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
	// A mode derived from a client CA or a bootstrap token file was chosen
	// by giving that file; only none may not be reached by default where
	// other hosts can connect. An empty address is Validate's to report.
	if c.NodeAuth == "" && mode == nodeauth.ModeNone && c.GRPCAddr != "" && !loopbackOnly(c.GRPCAddr) {
		errs = append(errs, errNodeAuthNotChosen(c.GRPCAddr))
	}
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
