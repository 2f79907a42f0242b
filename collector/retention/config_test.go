package retention

import (
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/testlab/configtest"
)

func TestConfigFlagsKeepDefaults(t *testing.T) {
	configtest.FlagsKeepDefaults(t, DefaultConfig, (*Config).RegisterFlags)
}

func TestConfigValidate(t *testing.T) {
	configtest.Problems(t, (&Config{}).Validate(), "--retention 0s", "--retention.rollup-1m 0s", "--retention.rollup-1h 0s",
		"--retention.nodes 0s", "--retention.alerts 0s", "--retention.audit 0s")
	c := DefaultConfig()
	configtest.Problems(t, c.Validate())
	c.Audit = 101 * 365 * 24 * time.Hour
	configtest.Problems(t, c.Validate(), "--retention.audit 884760h0m0s must be from 1 day to 100 years")
	c = DefaultConfig()
	c.Unreported = time.Hour // an agent may report hourly
	configtest.Problems(t, c.Validate(), "--retention.unreported-nodes 1h0m0s must be from 2h")
	c.Unreported = 31 * 24 * time.Hour
	configtest.Problems(t, c.Validate(), "--retention.unreported-nodes 744h0m0s must be from 2h to --retention.nodes (720h0m0s)")
}
