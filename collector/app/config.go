package app

import (
	"errors"
	"flag"
	"fmt"
	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/export/push"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/nodeconfig"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/retention"
	"github.com/nbs-project/nbs/collector/tenant"
	"github.com/nbs-project/nbs/internal/schema"
)

// Config is the collector's configuration: the app's own settings (where
// it listens, its database, its external URL and tenant label) and each
// part's Config, which registers and validates its own flags. Start from
// DefaultConfig: the command binds it to flags, tests change what they
// need.
type Config struct {
	GRPCAddr string
	HTTPAddr string
	DBURL    string
	// DBReadURL, when set, serves the heavy reads (series, histograms,
	// events, reports) from a replica such as a streaming standby
	// (store.Reads); the primary's read pool answers them while it cannot
	// be reached, and without it.
	DBReadURL string
	// DBWriters is how many writers store what agents send (ingest.Writer).
	DBWriters int
	// ExternalURL is where people reach this NBS, for links in alerts
	// ("": http://<HTTPAddr>).
	ExternalURL string
	// Tenant is the label key naming a node's tenant (--tenant.label):
	// bound server-side, and never crossed by customer tokens, the ping
	// mesh, counterparts, reports or alerts.
	Tenant tenant.Key
	// CounterpartLabel, when set, is a label key (say cluster or network)
	// whose value names an address space: counterparts match only between
	// nodes with the same value (--counterparts.label). The tenant always
	// bounds them.
	CounterpartLabel string

	// Ingest is what agents may send and hold, and how their streams are
	// served (--ingest.*, --grpc.* but the address and node-auth); its
	// MaxAge follows Retention.Raw.
	Ingest ingest.Config
	// NodeAuth is how node names in Hellos are verified (--grpc.node-auth,
	// --grpc.bootstrap-token-file, --grpc.node-identity-map-file): by
	// default mtls with a client CA, enroll with a bootstrap token file,
	// else none, which a GRPCAddr other hosts can reach refuses.
	NodeAuth nodeauth.Config
	// NodeConfig bounds what is pushed to agents (--thresholds.*,
	// --ping.*).
	NodeConfig nodeconfig.Config
	// HTTP bounds what one HTTP client may hold (--http.*-timeout,
	// --http.max-header-bytes, --http.max-connections).
	HTTP HTTPLimits
	// Reads bounds the heavy reads (reports, series, evidence): their own
	// database pool and statement timeout, and the slots one caller and
	// all callers may hold (--reads.*).
	Reads ReadLimits
	// Retention is how long each kind of data is kept (--retention*).
	Retention retention.Config
	Alert     alert.Config
	// Access is who may use the HTTP side: tokens, roles, the login page,
	// browser protections, HTTP TLS (--auth.*, --web.allowed-hosts,
	// --http.tls-*, --metrics.auth).
	Access access.Config
	// Reports bounds the saved report definitions (--reports.*); the zero
	// value is report.DefaultConfig.
	Reports report.Config
	// Export is what the Prometheus export holds (--export.*): its window,
	// counter hold and series caps; the zero value is export.DefaultConfig.
	Export export.Config
	// Push sends the export to remote write and OTLP receivers
	// (--export.push-interval, --export.queue-*, --export.receiver(s-file)):
	// nothing is pushed without receivers.
	Push push.Config
	// PprofAddr, when set, serves Go's profiles on this loopback address
	// (--debug.pprof-listen-address).
	PprofAddr string
}

// DefaultConfig is the production configuration, but for the database,
// which has no default.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:   ":7701",
		HTTPAddr:   ":7700",
		DBWriters:  ingest.DefaultWriterOptions().Workers,
		Tenant:     tenant.DefaultKey,
		Ingest:     ingest.DefaultConfig(),
		NodeConfig: nodeconfig.DefaultConfig(),
		HTTP:       DefaultHTTPLimits(),
		Reads:      DefaultReadLimits(),
		Retention:  retention.DefaultConfig(),
		Alert:      alert.DefaultConfig(),
		Access:     access.DefaultConfig(),
		Reports:    report.DefaultConfig(),
		Export:     export.DefaultConfig(),
		Push:       push.DefaultConfig(),
	}
}

// RegisterFlags binds the configuration to command-line flags, with the
// values already in c (DefaultConfig's, usually) as their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc.listen-address", c.GRPCAddr, "address for agent streams (gRPC)")
	fs.StringVar(&c.HTTPAddr, "http.listen-address", c.HTTPAddr, "address for the web UI, JSON API, /metrics and health")
	fs.StringVar(&c.DBURL, "db.url", c.DBURL, "PostgreSQL URL (env NBS_DB_URL), e.g. postgres://nbs@db:5432/nbs")
	fs.StringVar(&c.DBReadURL, "db.read-url", c.DBReadURL, "PostgreSQL URL of a read-only replica (env NBS_DB_READ_URL), e.g. a streaming standby: series, events and reports are read there, and from --db.url's read pool while it cannot be reached (default: everything from --db.url)")
	fs.IntVar(&c.DBWriters, "db.writers", c.DBWriters, "concurrent database writers (about one per database core)")
	fs.StringVar(&c.ExternalURL, "web.external-url", c.ExternalURL, "URL people use to reach this NBS, for links in alerts (default http://<http.listen-address>)")
	c.Tenant.RegisterFlag(fs)
	fs.StringVar(&c.CounterpartLabel, "counterparts.label", c.CounterpartLabel,
		"a label key naming a node's address space (say cluster): evidence counterparts match only between nodes with the same value; empty: the tenant alone bounds them")
	c.Ingest.RegisterFlags(fs)
	c.NodeAuth.RegisterFlags(fs)
	c.NodeConfig.RegisterFlags(fs)
	c.HTTP.RegisterFlags(fs)
	c.Reads.RegisterFlags(fs)
	c.Retention.RegisterFlags(fs)
	c.Alert.RegisterFlags(fs)
	c.Access.RegisterFlags(fs)
	c.Reports.RegisterFlags(fs)
	c.Export.RegisterFlags(fs)
	c.Push.RegisterFlags(fs)
	fs.StringVar(&c.PprofAddr, "debug.pprof-listen-address", c.PprofAddr, "loopback address serving Go's profiles at /debug/pprof/ (heap, goroutines, CPU), e.g. 127.0.0.1:7709 (default: off)")
}

// reports is the report limits in force: a Config not made by
// DefaultConfig has the defaults.
func (c *Config) reports() report.Config {
	r := c.Reports
	if r == (report.Config{}) {
		r = report.DefaultConfig()
	}
	// One tenant key for the whole collector: --tenant.label.
	if c.Tenant != "" {
		r.Tenant = c.Tenant
	}
	return r
}

// Validate reports every problem of the configuration at once: the app's
// own, each part's, and the rules between them (node-auth and who can
// reach the gRPC address, heavy reads and the HTTP write timeout).
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
	if c.PprofAddr != "" && !loopbackOnly(c.PprofAddr) {
		errs = append(errs, fmt.Errorf("--debug.pprof-listen-address %s must be a loopback address, e.g. %s", c.PprofAddr, loopbackOf(c.PprofAddr)))
	}
	if c.Export != (export.Config{}) {
		if err := c.Export.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Push.Configured() {
		errs = append(errs, c.Push.Validate())
		if _, err := c.Push.LoadReceivers(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.DBWriters < 1 || c.DBWriters > 64 {
		errs = append(errs, fmt.Errorf("--db.writers %d must be from 1 to 64", c.DBWriters))
	}
	if _, err := c.nodeAuthMode(); err != nil {
		errs = append(errs, err)
	}
	if c.CounterpartLabel != "" {
		if err := schema.CheckLabelKey(c.CounterpartLabel); err != nil {
			errs = append(errs, fmt.Errorf("--counterparts.label %.80q: %w", c.CounterpartLabel, err))
		}
	}
	errs = append(errs, c.Tenant.Validate(), c.Ingest.Validate(), c.NodeConfig.Validate(),
		c.HTTP.Validate(), c.Reads.Validate(c.HTTP.WriteTimeout), c.Retention.Validate(),
		alert.ValidateExternalURL(c.ExternalURL), c.Alert.Validate(), c.Access.Validate(), c.reports().Validate())
	return errors.Join(errs...)
}

// nodeAuthMode resolves --grpc.node-auth (nodeauth.Config.Resolve) and
// checks that none is not had by default where other hosts can connect: a
// mode derived from a client CA or a bootstrap token file was chosen by
// giving that file. An empty address is Validate's to report.
func (c *Config) nodeAuthMode() (nodeauth.Mode, error) {
	mode, err := c.NodeAuth.Resolve(c.Ingest.ClientCAFile != "")
	if c.NodeAuth.Mode == "" && mode == nodeauth.ModeNone && c.GRPCAddr != "" && !loopbackOnly(c.GRPCAddr) {
		err = errors.Join(errNodeAuthNotChosen(c.GRPCAddr), err)
	}
	return mode, err
}
