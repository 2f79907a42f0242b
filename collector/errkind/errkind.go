// Package errkind classifies the collector's errors by what the caller can
// do about them: fix the request (Invalid, TooLarge), look elsewhere
// (NotFound), retry later (Unavailable), and so on. Storage and domain code
// return these kinds, wrapped with what they were doing; only the HTTP edge
// (collector/httpjson) turns a kind into a status code, in one place.
package errkind

import (
	"errors"
	"fmt"
	"time"
)

// Kind is what went wrong, from the caller's point of view.
type Kind uint8

const (
	// Internal is a fault of the collector or its database, and the kind of
	// every error that carries no other.
	Internal Kind = iota
	// Invalid: the request is malformed or breaks a rule; the message says
	// every problem at once.
	Invalid
	// NotFound: a node, metric, rule, alert or route that does not exist.
	NotFound
	// Conflict: the request clashes with stored state (a duplicate name).
	Conflict
	// TooLarge: the request exceeds a size limit.
	TooLarge
	// Unavailable: a dependency (the database) cannot serve now; retry.
	Unavailable
	// Unauthorized: the caller did not say who they are.
	Unauthorized
	// Forbidden: the caller may not do this.
	Forbidden
	// Overloaded: the caller (or every caller together) has as much work
	// in flight as the collector admits; retry once some of it is done.
	Overloaded
	// Timeout: the work took longer than the collector allows one
	// request; retrying the same request will not help, asking for less
	// will.
	Timeout
	// UnsupportedMedia: the request's body is of a type the collector
	// does not accept (not JSON, e.g. a form a cross-site page can send).
	UnsupportedMedia
)

var names = [...]string{
	Internal:         "internal",
	Invalid:          "invalid",
	NotFound:         "not found",
	Conflict:         "conflict",
	TooLarge:         "too large",
	Unavailable:      "unavailable",
	Unauthorized:     "unauthorized",
	Forbidden:        "forbidden",
	Overloaded:       "overloaded",
	Timeout:          "timeout",
	UnsupportedMedia: "unsupported media type",
}

func (k Kind) String() string {
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Kinds lists every kind, for tables that must cover them all.
func Kinds() []Kind {
	out := make([]Kind, len(names))
	for i := range names {
		out[i] = Kind(i)
	}
	return out
}

// kindError gives an error a kind; its text is the wrapped error's.
type kindError struct {
	kind Kind
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

// New returns a sentinel error of kind k: errors.Is matches it, and Of
// finds its kind through any wrapping, e.g.
//
//	var ErrNotFound = errkind.New(errkind.NotFound, "not found")
//	return fmt.Errorf("node %q: %w", name, ErrNotFound)
func New(k Kind, text string) error { return &kindError{k, errors.New(text)} }

// Errorf formats an error of kind k; %w wraps as in fmt.Errorf.
func Errorf(k Kind, format string, args ...any) error {
	return &kindError{k, fmt.Errorf(format, args...)}
}

// Of returns the kind of the outermost classified error in err's chain, or
// Internal when there is none.
func Of(err error) Kind {
	var ke *kindError
	if errors.As(err, &ke) {
		return ke.kind
	}
	return Internal
}

// retryError tells the caller when trying again may succeed.
type retryError struct {
	err   error
	after time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// WithRetryAfter says that err is worth retrying after d (an HTTP answer
// carries it as Retry-After). Its kind and text are err's.
func WithRetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryError{err, d}
}

// RetryAfter returns the outermost WithRetryAfter hint in err's chain.
func RetryAfter(err error) (time.Duration, bool) {
	var re *retryError
	if errors.As(err, &re) {
		return re.after, true
	}
	return 0, false
}
