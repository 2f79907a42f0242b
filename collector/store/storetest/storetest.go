// Package storetest opens the collector's store on a throwaway database for
// tests of the packages that read and write through it. The test binary
// must run internal/pgcluster's Main.
package storetest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// Open is a store on a fresh database with every migration applied,
// closed when the test ends.
func Open(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}
