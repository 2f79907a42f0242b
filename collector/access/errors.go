package access

import (
	"fmt"

	"github.com/nbs-project/nbs/collector/errkind"
)

// Errors classify failures for callers and, by their kinds, for the HTTP
// answer (collector/httpjson): 401, 403, 404, 400 and 409.
var (
	ErrUnauthenticated = errkind.New(errkind.Unauthorized, "unauthenticated")
	ErrForbidden       = errkind.New(errkind.Forbidden, "forbidden")
	ErrNotFound        = errkind.New(errkind.NotFound, "not found")
	ErrInvalid         = errkind.New(errkind.Invalid, "invalid")
	ErrConflict        = errkind.New(errkind.Conflict, "conflict")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
