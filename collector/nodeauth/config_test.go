package nodeauth

import (
	"testing"

	"github.com/nbs-project/nbs/internal/testlab/configtest"
)

func TestConfigFlagsKeepDefaults(t *testing.T) {
	configtest.FlagsKeepDefaults(t, func() Config { return Config{} }, (*Config).RegisterFlags)
}

// Resolve's cases, and the rule that none is no default where other hosts
// connect, are collector/app's TestNodeAuthMode and TestNodeAuthOffLoopback.
