package report

import (
	"errors"
	"flag"
	"fmt"
)

// Defaults of the limits on saved report definitions.
const (
	DefaultMaxDefinitions            = 10000
	DefaultMaxDefinitionsPerSelector = 100
)

// Config bounds the saved report definitions (--reports.*).
type Config struct {
	// MaxDefinitions is how many may be saved in all.
	MaxDefinitions int
	// MaxDefinitionsPerSelector is how many may be saved with one
	// selector, i.e. about one tenant's nodes (customer=acme): one scope
	// cannot use up what every other tenant shares.
	MaxDefinitionsPerSelector int
}

// DefaultConfig is the configuration the flags default to.
func DefaultConfig() Config {
	return Config{MaxDefinitions: DefaultMaxDefinitions, MaxDefinitionsPerSelector: DefaultMaxDefinitionsPerSelector}
}

// RegisterFlags binds the flags, with the values already in c as their
// defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxDefinitions, "reports.max-definitions", c.MaxDefinitions, "most saved report definitions in all; saving one more is refused (409)")
	fs.IntVar(&c.MaxDefinitionsPerSelector, "reports.max-definitions-per-selector", c.MaxDefinitionsPerSelector, "most saved report definitions with one selector (one tenant's scope, e.g. customer=acme); saving one more is refused (409)")
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.MaxDefinitions < 1 || c.MaxDefinitions > 1_000_000 {
		errs = append(errs, fmt.Errorf("--reports.max-definitions %d must be from 1 to 1000000", c.MaxDefinitions))
	}
	if c.MaxDefinitionsPerSelector < 1 || c.MaxDefinitionsPerSelector > c.MaxDefinitions {
		errs = append(errs, fmt.Errorf("--reports.max-definitions-per-selector %d must be from 1 to --reports.max-definitions (%d)", c.MaxDefinitionsPerSelector, c.MaxDefinitions))
	}
	return errors.Join(errs...)
}
