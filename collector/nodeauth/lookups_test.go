package nodeauth

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// Hellos authenticated at once share their reads of the names' bindings,
// and each still gets its own name's: a revoked name is refused, a name
// with labels bound gets them, a free name gets none.
func TestHellosShareBindingReads(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	auth, err := NewAuthenticator(st.Pool(), Options{Mode: ModeNone}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	admin := NewAdmin(st, nil, ModeNone, "", slog.New(slog.DiscardHandler))
	const each = 20
	for i := range each {
		if err := admin.Revoke(ctx, fmt.Sprintf("gone-%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := admin.Label(ctx, fmt.Sprintf("bound-%d", i), map[string]string{"customer": fmt.Sprintf("c%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	type hello struct {
		node string
		want func(ingest.Grant, error) error
	}
	var hellos []hello
	for i := range each {
		hellos = append(hellos,
			hello{fmt.Sprintf("free-%d", i), func(g ingest.Grant, err error) error {
				if err != nil || g.Bound != nil {
					return fmt.Errorf("got %v, %v; want no labels bound, no error", g.Bound, err)
				}
				return nil
			}},
			hello{fmt.Sprintf("gone-%d", i), func(g ingest.Grant, err error) error {
				if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "was revoked") {
					return fmt.Errorf("got %v; want PermissionDenied, revoked", err)
				}
				return nil
			}},
			hello{fmt.Sprintf("bound-%d", i), func(g ingest.Grant, err error) error {
				if want := fmt.Sprintf("c%d", i); err != nil || g.Bound["customer"] != want || len(g.Bound) != 1 {
					return fmt.Errorf("got %v, %v; want customer=%s bound", g.Bound, err, want)
				}
				return nil
			}})
	}
	var wg sync.WaitGroup
	errs := make([]error, len(hellos))
	for i, h := range hellos {
		wg.Go(func() {
			g, err := auth.Authenticate(ctx, helloWith(h.node, nil))
			if e := h.want(g, err); e != nil {
				errs[i] = fmt.Errorf("%s: %w", h.node, e)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	auth.lookups.mu.Lock()
	reads := auth.lookups.reads
	auth.lookups.mu.Unlock()
	if reads >= len(hellos) {
		t.Errorf("%d Hellos at once took %d reads of their bindings, want them shared", len(hellos), reads)
	}
	t.Logf("%d Hellos, %d reads", len(hellos), reads)
}
