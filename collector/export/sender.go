package export

import (
	"context"
	"errors"
	"time"
)

// Receiver is one place the collector pushes the export to, as the
// operator configures it (collector/export/push reads the list).
type Receiver struct {
	// Name identifies it in logs and metrics (nbs_collector_export_push_*{receiver}).
	Name string `json:"name"`
	// Type is "remote_write" (Prometheus remote write) or "otlp" (OTLP
	// metrics over HTTP).
	Type string `json:"type"`
	URL  string `json:"url"`
	// Match narrows what is sent to the nodes whose labels carry these
	// (the selector form "label=value,…"; empty: every node).
	Match string `json:"match,omitempty"`
	// Headers are sent with every request, e.g. X-Scope-OrgID for a
	// multi-tenant receiver (Mimir, Cortex, Thanos receive).
	Headers map[string]string `json:"headers,omitempty"`
	// BearerTokenFile, when set, is read for an Authorization: Bearer token.
	BearerTokenFile string `json:"bearer_token_file,omitempty"`
	// Version of remote write: "1.0" (default) or "2.0".
	Version string        `json:"version,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Sender delivers one snapshot to one receiver. It returns an error
// wrapped by Permanent when sending it again cannot succeed (the receiver
// refused its content, HTTP 4xx other than 429): the pusher drops that
// snapshot and counts it; any other error is retried with backoff.
type Sender interface {
	Send(ctx context.Context, s Snapshot) error
}

// PermanentError marks an error that a retry cannot cure.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a PermanentError.
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent reports whether err, or what it wraps, is permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
