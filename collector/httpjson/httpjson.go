// Package httpjson is the JSON edge of the collector's HTTP side, shared by
// the API (collector/api), access control (collector/access) and every part
// with routes: request bodies are decoded one way (Decode), answers are
// encoded before anything is written (Write), and errors are answered
// through the one mapping from their kind (collector/errkind) to an HTTP
// status and a stable code, in the one envelope (WriteError, ErrorBody).
package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
)

// answer is how one kind of error is told to an HTTP client.
type answer struct {
	status int
	code   string // ErrorDetail.Code, stable for clients
}

// answers is the one mapping from error kinds to HTTP; openapi.json lists
// the same codes (ErrorDetail.code) and the API's tests hold the two
// together.
var answers = map[errkind.Kind]answer{
	errkind.Internal:         {http.StatusInternalServerError, "internal"},
	errkind.Invalid:          {http.StatusBadRequest, "bad_request"},
	errkind.NotFound:         {http.StatusNotFound, "not_found"},
	errkind.Conflict:         {http.StatusConflict, "conflict"},
	errkind.TooLarge:         {http.StatusRequestEntityTooLarge, "too_large"},
	errkind.Unavailable:      {http.StatusServiceUnavailable, "unavailable"},
	errkind.Unauthorized:     {http.StatusUnauthorized, "unauthorized"},
	errkind.Forbidden:        {http.StatusForbidden, "forbidden"},
	errkind.Overloaded:       {http.StatusTooManyRequests, "too_many_requests"},
	errkind.Timeout:          {http.StatusGatewayTimeout, "timeout"},
	errkind.UnsupportedMedia: {http.StatusUnsupportedMediaType, "unsupported_media_type"},
}

// Codes lists the code of every kind's answer, for the tests that hold
// openapi.json to them.
func Codes() []string {
	codes := make([]string, 0, len(answers))
	for _, a := range answers {
		codes = append(codes, a.code)
	}
	return codes
}

// retryAfter is the Retry-After of an answer of kind k: err's own hint, or
// for the kinds that are worth retrying a default.
func retryAfter(k errkind.Kind, err error) (time.Duration, bool) {
	if d, ok := errkind.RetryAfter(err); ok {
		return d, true
	}
	switch k {
	case errkind.Unavailable:
		return store.DownRetryAfter, true
	case errkind.Overloaded:
		return time.Second, true
	}
	return 0, false
}

// SetRetryAfter sets the Retry-After header in whole seconds, at least 1.
func SetRetryAfter(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10))
}

// ErrorBody is the JSON envelope of every error answer under /api/v1.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteError answers with the JSON error envelope for err's kind. Internal
// errors are logged and answered with a generic message, since they may
// carry internal detail; the others carry their own message, which says
// what to change. An error that no code classified but that says the
// database cannot be reached (store.DatabaseDown) is Unavailable: every
// route answers 503 with Retry-After while it is down, not 500. Answers
// worth retrying (503, 429) carry Retry-After, and a 401 says how to sign
// in (WWW-Authenticate).
func WriteError(w http.ResponseWriter, r *http.Request, err error, log *slog.Logger) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away; nobody reads the answer
	}
	k, msg := errkind.Of(err), err.Error()
	var mbe *http.MaxBytesError
	if k == errkind.Internal && errors.As(err, &mbe) { // the body limit's own error, which no domain code saw
		k, msg = errkind.TooLarge, fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)
	}
	if k == errkind.Internal && store.DatabaseDown(err) {
		if log != nil {
			log.Warn("request failed: the database cannot be reached", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		k, msg = errkind.Unavailable, store.DownMessage
	}
	a, ok := answers[k]
	if !ok || k == errkind.Internal {
		if log != nil {
			log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		a, msg = answers[errkind.Internal], "internal error; the collector log has the details (request "+middleware.GetReqID(r.Context())+")"
	}
	if d, ok := retryAfter(k, err); ok && a.status != http.StatusInternalServerError {
		SetRetryAfter(w.Header(), d)
	}
	if a.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="nbs"`)
	}
	Write(w, a.status, ErrorBody{ErrorDetail{a.code, msg}})
}

// Write answers v as JSON with the status code.
// It encodes before writing anything: a value that cannot be encoded (a NaN
// that slipped through) answers 500 with the error envelope, never a 200
// with an empty body a client would take for success.
func Write(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		// Write has no logger of its own; the process's default one is
		// the collector's.
		slog.Error("encode JSON answer", "status", status, "err", err)
		buf.Reset()
		a := answers[errkind.Internal]
		_ = json.NewEncoder(&buf).Encode(ErrorBody{ErrorDetail{a.code, "internal error: the answer could not be encoded; the collector log has the details"}})
		status = a.status
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// Decode reads a request body holding exactly one JSON value into v,
// refusing fields v does not have: a typo must not be silently ignored,
// and a string holding a NUL byte (\u0000), which PostgreSQL stores in
// neither text nor jsonb, naming where it is. (Invalid UTF-8 needs no
// check: the decoder replaces it.)
func Decode(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return errkind.Errorf(errkind.TooLarge, "request body is larger than %d bytes", mbe.Limit)
	case err != nil:
		return errkind.Errorf(errkind.Invalid, "request body: %w", err)
	}
	if err := decode(bytes.NewReader(body), v); err != nil {
		return err
	}
	if at, ok := nulAt(body); ok {
		return errkind.Errorf(errkind.Invalid, "request body: %s holds a NUL byte (\\u0000); no field may", at)
	}
	return nil
}

// nulAt finds a string of a JSON document holding U+0000, and says where
// ("name", "labels.team", "objectives[1].name", or "a key of labels").
func nulAt(body []byte) (string, bool) {
	if !hasNULEscape(body) {
		return "", false
	}
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return "a string", true
	}
	var walk func(v any, at string) (string, bool)
	walk = func(v any, at string) (string, bool) {
		switch x := v.(type) {
		case string:
			return at, strings.ContainsRune(x, 0)
		case []any:
			for i, e := range x {
				if w, ok := walk(e, fmt.Sprintf("%s[%d]", at, i)); ok {
					return w, true
				}
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				name := k
				if at != "" {
					name = at + "." + k
				}
				if strings.ContainsRune(k, 0) {
					if at == "" {
						return "a key of the body", true
					}
					return "a key of " + at, true
				}
				if w, ok := walk(x[k], name); ok {
					return w, true
				}
			}
		}
		return "", false
	}
	if at, ok := walk(doc, ""); ok {
		if at == "" {
			at = "the body"
		}
		return strconv.Quote(at), true
	}
	return "", false
}

// hasNULEscape reports whether body holds the escape \u0000 (not an
// escaped backslash followed by the text u0000).
func hasNULEscape(body []byte) bool {
	for i := 0; i+6 <= len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if string(body[i+1:i+6]) == "u0000" {
			return true
		}
		i++ // the escaped character, a backslash included
	}
	return false
}

func decode(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return errkind.Errorf(errkind.TooLarge, "request body is larger than %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		return errkind.Errorf(errkind.Invalid, "request body is empty; send a JSON object")
	case err != nil:
		return errkind.Errorf(errkind.Invalid, "request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if errors.As(err, &mbe) {
			return errkind.Errorf(errkind.TooLarge, "request body is larger than %d bytes", mbe.Limit)
		}
		return errkind.Errorf(errkind.Invalid, "request body: more than one JSON value")
	}
	return nil
}
