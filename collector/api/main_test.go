package api_test

import (
	"testing"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

// TestMain gives the tests that read a real store (fleet_test.go) a
// throwaway PostgreSQL cluster, started on first use only.
func TestMain(m *testing.M) { pgcluster.Main(m) }
