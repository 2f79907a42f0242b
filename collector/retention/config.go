package retention

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Config is how long each kind of data is kept.
type Config struct {
	// Raw is how long reports, histograms and evidence are kept (whole
	// UTC days: a day partition goes once all of it is older), and a
	// metric's newest value stays in a node's latest values.
	Raw time.Duration
	// Rollup1m keeps minute rollups; Rollup1h hour and day rollups.
	Rollup1m, Rollup1h time.Duration
	// Nodes: a node that has not reported for this long is deleted with
	// everything it reported, rollups included, and its credential.
	Nodes time.Duration
	// Unreported: a node that registered (its Hello) and has never
	// reported is deleted this long after its last Hello; zero is
	// DefaultUnreported.
	Unreported time.Duration
	// Alerts keeps resolved alerts and their delivery log.
	Alerts time.Duration
	// Audit keeps the audit log.
	Audit time.Duration
}

// Catalogue is how long a node's definition of a metric outlives the
// metric's last report: as long as a rollup may hold the metric, since
// reports read its title and unit from the definition.
func (c Config) Catalogue() time.Duration { return max(c.Raw, c.Rollup1m, c.Rollup1h) }

// DefaultUnreported is how long a node that registered and never
// reported keeps its place: an agent reports within its interval (at most
// an hour), so one silent for hours since its Hello is a name enrolled
// and not used.
const DefaultUnreported = 6 * time.Hour

func (c Config) unreported() time.Duration {
	if c.Unreported == 0 {
		return DefaultUnreported
	}
	return c.Unreported
}

// DefaultConfig is the production configuration.
func DefaultConfig() Config {
	return Config{
		Raw: 30 * 24 * time.Hour,
		// Minute rollups cover the longest raw period a report may ask
		// minute detail of; hour rollups cover a report's maximum (400 days)
		// and its previous period.
		Rollup1m: 90 * 24 * time.Hour,
		Rollup1h: 800 * 24 * time.Hour,
		// A node silent as long as raw data is kept has nothing left to
		// show but rollups; kept longer, churned Kubernetes nodes pile up
		// against --ingest.max-nodes.
		Nodes:      30 * 24 * time.Hour,
		Unreported: DefaultUnreported,
		Alerts:     90 * 24 * time.Hour,
		Audit:      400 * 24 * time.Hour,
	}
}

// RegisterFlags binds the flags, with the values already in c
// (DefaultConfig's, usually) as their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Raw, "retention", c.Raw, "how long reports are kept; older day partitions are dropped")
	fs.DurationVar(&c.Rollup1m, "retention.rollup-1m", c.Rollup1m, "how long the 1-minute report rollups are kept (incidents, reports up to 2 days)")
	fs.DurationVar(&c.Rollup1h, "retention.rollup-1h", c.Rollup1h, "how long the 1-hour and 1-day report rollups are kept (longer reports and their previous periods)")
	fs.DurationVar(&c.Nodes, "retention.nodes", c.Nodes, "a node that has not reported for this long is deleted with all its data, rollups included, and its credential (a running agent registers again)")
	fs.DurationVar(&c.Unreported, "retention.unreported-nodes", c.Unreported, "a node that registered (its Hello) and never reported is deleted this long after its last Hello, so names enrolled and never used do not hold places under --ingest.max-nodes (its credential and bound labels stay); 2h to --retention.nodes")
	fs.DurationVar(&c.Alerts, "retention.alerts", c.Alerts, "how long resolved alerts and their delivery log are kept")
	fs.DurationVar(&c.Audit, "retention.audit", c.Audit, "how long the audit log is kept")
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Raw < 24*time.Hour {
		errs = append(errs, fmt.Errorf("--retention %s is shorter than one day partition", c.Raw))
	}
	if c.Rollup1m < time.Hour {
		errs = append(errs, fmt.Errorf("--retention.rollup-1m %s is shorter than an hour", c.Rollup1m))
	}
	if c.Rollup1h < 24*time.Hour {
		errs = append(errs, fmt.Errorf("--retention.rollup-1h %s is shorter than a day", c.Rollup1h))
	}
	// Against a node retention out of its own bounds, reported below,
	// only the lower bound is checked.
	nodesOK := c.Nodes >= 24*time.Hour && c.Nodes <= 100*365*24*time.Hour
	if c.Unreported != 0 && (c.Unreported < 2*time.Hour || (nodesOK && c.Unreported > c.Nodes)) {
		errs = append(errs, fmt.Errorf("--retention.unreported-nodes %s must be from 2h to --retention.nodes (%s)", c.Unreported, c.Nodes))
	}
	for _, r := range []struct {
		flag string
		v    time.Duration
	}{{"--retention.nodes", c.Nodes}, {"--retention.alerts", c.Alerts}, {"--retention.audit", c.Audit}} {
		if r.v < 24*time.Hour || r.v > 100*365*24*time.Hour {
			errs = append(errs, fmt.Errorf("%s %s must be from 1 day to 100 years", r.flag, r.v))
		}
	}
	return errors.Join(errs...)
}
