package report

import (
	"errors"
	"flag"
	"fmt"

	"github.com/nbs-project/nbs/collector/tenant"
)

// Defaults of the limits on saved report definitions.
const (
	DefaultMaxDefinitions          = 10000
	DefaultMaxDefinitionsPerTenant = 100
)

// Config bounds the saved report definitions (--reports.*).
type Config struct {
	// MaxDefinitions is how many may be saved in all.
	MaxDefinitions int
	// MaxDefinitionsPerTenant is how many may be saved for one tenant:
	// those whose selector names it (customer=acme, whatever other labels
	// it adds), so that varying a second label gains a tenant nothing.
	// The definitions that name no tenant (staff's, over the fleet) count
	// as one more tenant.
	MaxDefinitionsPerTenant int
	// Tenant is the label key naming a node's tenant (--tenant.label,
	// bound by collector/app, not a flag of its own).
	Tenant tenant.Key
}

// DefaultConfig is the configuration the flags default to.
func DefaultConfig() Config {
	return Config{MaxDefinitions: DefaultMaxDefinitions, MaxDefinitionsPerTenant: DefaultMaxDefinitionsPerTenant, Tenant: tenant.DefaultKey}
}

// RegisterFlags binds the flags, with the values already in c as their
// defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxDefinitions, "reports.max-definitions", c.MaxDefinitions, "most saved report definitions in all; saving one more is refused (409)")
	fs.IntVar(&c.MaxDefinitionsPerTenant, "reports.max-definitions-per-tenant", c.MaxDefinitionsPerTenant,
		"most saved report definitions whose selector names one tenant (--tenant.label, e.g. customer=acme, whatever other labels it adds); those naming no tenant count as one more; saving one more is refused (409)")
	// The name the limit had while it was counted per selector; a
	// deployment's flags keep working, now with the tenant's meaning.
	fs.IntVar(&c.MaxDefinitionsPerTenant, "reports.max-definitions-per-selector", c.MaxDefinitionsPerTenant,
		"deprecated name of --reports.max-definitions-per-tenant")
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.MaxDefinitions < 1 || c.MaxDefinitions > 1_000_000 {
		errs = append(errs, fmt.Errorf("--reports.max-definitions %d must be from 1 to 1000000", c.MaxDefinitions))
	}
	if c.MaxDefinitionsPerTenant < 1 || c.MaxDefinitionsPerTenant > c.MaxDefinitions {
		errs = append(errs, fmt.Errorf("--reports.max-definitions-per-tenant %d must be from 1 to --reports.max-definitions (%d)", c.MaxDefinitionsPerTenant, c.MaxDefinitions))
	}
	return errors.Join(errs...)
}
