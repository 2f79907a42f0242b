package nodeconfig

import (
	"errors"
	"flag"
	"fmt"
)

// Config is what the collector pushes to agents, bounded: threshold
// overrides (--thresholds.*) and the ping mesh (--ping.*).
type Config struct {
	// MaxOverrides caps the stored threshold overrides.
	MaxOverrides int
	// PingPeers is how many fleet peers each node is told to ping (0 or
	// less: no ping mesh).
	PingPeers int
}

// DefaultConfig is the production configuration.
func DefaultConfig() Config {
	return Config{MaxOverrides: DefaultMaxOverrides, PingPeers: DefaultPingPeers}
}

// RegisterFlags binds the flags, with the values already in c
// (DefaultConfig's, usually) as their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxOverrides, "thresholds.max-overrides", c.MaxOverrides, "most threshold overrides that may be stored")
	fs.IntVar(&c.PingPeers, "ping.peers", c.PingPeers, "fleet peers each node pings and is pinged by, drawn deterministically from the nodes that announce a ping address (0: no ping mesh)")
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxOverrides < 1 || c.MaxOverrides > 1_000_000 {
		errs = append(errs, fmt.Errorf("--thresholds.max-overrides %d must be from 1 to 1000000", c.MaxOverrides))
	}
	if c.PingPeers > 1000 {
		errs = append(errs, fmt.Errorf("--ping.peers %d is more than 1000", c.PingPeers))
	}
	return errors.Join(errs...)
}
