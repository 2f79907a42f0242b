package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// ErrUnavailable says the database that holds tokens and sessions could
// not be asked: the caller's credential may well be good, so the answer
// is 503 with Retry-After — never 401, which would log a browser out, nor
// 500, which would send people looking for a bug.
var ErrUnavailable = errors.New("the database cannot be reached")

// lookupTimeout bounds finding a request's caller. The lookup is one
// indexed row on the primary's pool, which heavy reads do not use, so it
// takes milliseconds; past this the database is as good as unreachable
// (a host gone mid-failover), and the client is better told so than kept
// waiting.
const lookupTimeout = 5 * time.Second

// authenticateWithin is authenticate bounded by lookupTimeout, telling a
// database that cannot be reached apart from a credential that does not
// work.
func (a *Access) authenticateWithin(r *http.Request) (Principal, error) {
	ctx, cancel := context.WithTimeout(r.Context(), lookupTimeout)
	defer cancel()
	p, err := a.authenticate(r.WithContext(ctx))
	if err == nil || r.Context().Err() != nil || errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrForbidden) {
		return p, err
	}
	if ctx.Err() != nil || store.DatabaseDown(err) {
		return Principal{}, fmt.Errorf("check the caller's credential: %w: %w", ErrUnavailable, err)
	}
	return p, err
}

// writeUnavailable answers 503 with Retry-After for a database that
// cannot be reached, logging what failed.
func writeUnavailable(w http.ResponseWriter, r *http.Request, err error, log *slog.Logger) {
	if log != nil {
		log.Warn("request failed: the database cannot be reached", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(store.DownRetryAfter/time.Second)))
	writeJSON(w, http.StatusServiceUnavailable, errorBody{errorDetail{"unavailable", store.DownMessage}})
}
