package nodeconfig

import (
	"testing"

	"github.com/nbs-project/nbs/internal/testlab/configtest"
)

func TestConfigFlagsKeepDefaults(t *testing.T) {
	configtest.FlagsKeepDefaults(t, DefaultConfig, (*Config).RegisterFlags)
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	configtest.Problems(t, c.Validate())
	c.PingPeers = 0 // no ping mesh
	configtest.Problems(t, c.Validate())
	c.MaxOverrides, c.PingPeers = 0, 1001
	configtest.Problems(t, c.Validate(), "--thresholds.max-overrides 0 must be from 1 to 1000000", "--ping.peers 1001 is more than 1000")
}
