package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
)

func TestWriteError(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		status     int
		code       string
		message    string // the whole message, or "" for the internal one
		logsDetail bool
	}{
		{"invalid", errkind.Errorf(errkind.Invalid, "limit %q must be an integer from 1 to 1000", "x"), 400, "bad_request", `limit "x" must be an integer from 1 to 1000`, false},
		{"store not found, wrapped", fmt.Errorf("node %q: %w", "web-9", store.ErrNotFound), 404, "not_found", `node "web-9": not found`, false},
		{"conflict", errkind.Errorf(errkind.Conflict, "an alert rule named %q exists already", "X"), 409, "conflict", `an alert rule named "X" exists already`, false},
		{"too large", errkind.Errorf(errkind.TooLarge, "request body is larger than 10 bytes"), 413, "too_large", "request body is larger than 10 bytes", false},
		{"body limit of net/http", fmt.Errorf("decode: %w", &http.MaxBytesError{Limit: 1 << 20}), 413, "too_large", "request body is larger than 1048576 bytes", false},
		{"unavailable", errkind.Errorf(errkind.Unavailable, "database: %w", errors.New("connection refused")), 503, "unavailable", "database: connection refused", false},
		{"unauthorized", errkind.Errorf(errkind.Unauthorized, "no credentials"), 401, "unauthorized", "no credentials", false},
		{"forbidden", errkind.Errorf(errkind.Forbidden, "read only"), 403, "forbidden", "read only", false},
		{"overloaded", errkind.Errorf(errkind.Overloaded, "2 reports in flight"), 429, "too_many_requests", "2 reports in flight", false},
		{"timeout", errkind.Errorf(errkind.Timeout, "the read took longer than 30s"), 504, "timeout", "the read took longer than 30s", false},
		{"unsupported media", errkind.Errorf(errkind.UnsupportedMedia, "send application/json"), 415, "unsupported_media_type", "send application/json", false},
		{"database down, unclassified", fmt.Errorf("read node: %w", &pgconn.ConnectError{}), 503, "unavailable", store.DownMessage, true},
		{"internal hides its detail", fmt.Errorf("read node: %w", errors.New("password authentication failed for nbs")), 500, "internal", "", true},
		{"internal kind", errkind.Errorf(errkind.Internal, "secret"), 500, "internal", "", true},
		{"a deadline is not the client's doing", fmt.Errorf("query: %w", context.DeadlineExceeded), 500, "internal", "", true},
	}
	seen := map[errkind.Kind]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seen[kindOfForTest(c.err)] = true
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			w := httptest.NewRecorder()
			WriteError(w, httptest.NewRequest("GET", "/api/v1/x", nil), c.err, log)
			var body ErrorBody
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("body: %v", err)
			}
			if w.Code != c.status || body.Error.Code != c.code {
				t.Errorf("HTTP %d %q, want %d %q", w.Code, body.Error.Code, c.status, c.code)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if auth := w.Header().Get("WWW-Authenticate"); (auth != "") != (c.status == http.StatusUnauthorized) {
				t.Errorf("WWW-Authenticate %q on HTTP %d", auth, w.Code)
			}
			switch {
			case c.message != "" && body.Error.Message != c.message:
				t.Errorf("message %q, want %q", body.Error.Message, c.message)
			case c.message == "" && (!strings.HasPrefix(body.Error.Message, "internal error;") || strings.Contains(body.Error.Message, c.err.Error())):
				t.Errorf("message %q must be the generic one, without %q", body.Error.Message, c.err.Error())
			}
			if logged := strings.Contains(logs.String(), "request failed"); logged != c.logsDetail {
				t.Errorf("logged %v, want %v: %s", logged, c.logsDetail, logs.String())
			}
		})
	}
	for _, k := range errkind.Kinds() {
		if _, ok := answers[k]; !ok {
			t.Errorf("kind %v has no HTTP answer", k)
		}
		if !seen[k] {
			t.Errorf("kind %v is not tested", k)
		}
	}

	t.Run("a client that went away gets nothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w := httptest.NewRecorder()
		WriteError(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx), fmt.Errorf("query: %w", context.Canceled), nil)
		if w.Body.Len() != 0 {
			t.Errorf("wrote %q", w.Body.String())
		}
	})
}

// TestWriteErrorRetryAfter: the answers worth retrying say when.
func TestWriteErrorRetryAfter(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name   string
		err    error
		status int
		retry  string // the Retry-After header; "" for none
	}{
		{"overloaded, with the limiter's hint", errkind.WithRetryAfter(errkind.Errorf(errkind.Overloaded, "busy"), 2*time.Second), 429, "2"},
		{"overloaded, a hint rounded up", errkind.WithRetryAfter(errkind.Errorf(errkind.Overloaded, "busy"), 1500*time.Millisecond), 429, "2"},
		{"overloaded, no hint", errkind.Errorf(errkind.Overloaded, "busy"), 429, "1"},
		{"unavailable", errkind.Errorf(errkind.Unavailable, "database: down"), 503, "5"},
		{"connection refused", fmt.Errorf("list nodes: %w", refused), 503, "5"},
		{"server shutting down", fmt.Errorf("list nodes: %w", &pgconn.PgError{Code: "57P01"}), 503, "5"},
		{"a timeout is not worth retrying as is", errkind.Errorf(errkind.Timeout, "too slow"), 504, ""},
		{"internal", errors.New("bug"), 500, ""},
		{"internal with a hint still says nothing", errkind.WithRetryAfter(errors.New("bug"), time.Second), 500, ""},
		{"invalid", errkind.Errorf(errkind.Invalid, "bad"), 400, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			WriteError(w, httptest.NewRequest("GET", "/api/v1/x", nil), c.err, slog.New(slog.DiscardHandler))
			if w.Code != c.status || w.Header().Get("Retry-After") != c.retry {
				t.Errorf("HTTP %d, Retry-After %q; want %d, %q", w.Code, w.Header().Get("Retry-After"), c.status, c.retry)
			}
		})
	}
}

func kindOfForTest(err error) errkind.Kind {
	var mbe *http.MaxBytesError
	if errkind.Of(err) == errkind.Internal && errors.As(err, &mbe) {
		return errkind.TooLarge
	}
	return errkind.Of(err)
}

func TestDecode(t *testing.T) {
	type target struct {
		Seconds int               `json:"seconds"`
		Name    string            `json:"name"`
		Labels  map[string]string `json:"labels"`
		List    []struct {
			Name string `json:"name"`
		} `json:"list"`
	}
	cases := []struct {
		name, body string
		limit      int64
		want       int
		kind       errkind.Kind
		wantErr    string
	}{
		{"valid", `{"seconds": 5}`, 1 << 20, 5, errkind.Internal, ""},
		{"trailing white space", "{\"seconds\": 5}\n\n", 1 << 20, 5, errkind.Internal, ""},
		{"unknown field", `{"seconds": 5, "secs": 6}`, 1 << 20, 0, errkind.Invalid, `unknown field "secs"`},
		{"wrong type", `{"seconds": "5"}`, 1 << 20, 0, errkind.Invalid, "request body"},
		{"not JSON", `seconds=5`, 1 << 20, 0, errkind.Invalid, "request body"},
		{"empty", ``, 1 << 20, 0, errkind.Invalid, "request body is empty"},
		{"two values", `{"seconds": 5}{"seconds": 6}`, 1 << 20, 0, errkind.Invalid, "more than one JSON value"},
		{"over the limit", `{"seconds": 5, "pad": "` + strings.Repeat("x", 100) + `"}`, 20, 0, errkind.TooLarge, "larger than 20 bytes"},
		{"over the limit after the value", `{"seconds": 5}` + strings.Repeat(" ", 100), 20, 0, errkind.TooLarge, "larger than 20 bytes"},
		// PostgreSQL stores a NUL byte in neither text nor jsonb.
		{"a NUL in a field", `{"seconds": 5, "name": "a\u0000b"}`, 1 << 20, 0, errkind.Invalid, `"name" holds a NUL byte`},
		{"a NUL in a map value", `{"labels": {"team": "x\u0000"}}`, 1 << 20, 0, errkind.Invalid, `"labels.team" holds a NUL byte`},
		{"a NUL in a map key", `{"labels": {"te\u0000am": "x"}}`, 1 << 20, 0, errkind.Invalid, `"a key of labels" holds a NUL byte`},
		{"a NUL in a list", `{"list": [{"name": "a"}, {"name": "\u0000"}]}`, 1 << 20, 0, errkind.Invalid, `"list[1].name" holds a NUL byte`},
		{"an escaped backslash before u0000 is text", `{"seconds": 7, "name": "C:\\u0000"}`, 1 << 20, 7, errkind.Internal, ""},
		{"invalid UTF-8 is replaced, not refused", "{\"seconds\": 8, \"name\": \"\xff\"}", 1 << 20, 8, errkind.Internal, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
			r.Body = http.MaxBytesReader(w, io.NopCloser(r.Body), c.limit)
			var v target
			err := Decode(r, &v)
			if c.wantErr == "" {
				if err != nil || v.Seconds != c.want {
					t.Fatalf("Decode = %v, %+v; want %d", err, v, c.want)
				}
				return
			}
			if err == nil || errkind.Of(err) != c.kind || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("Decode = %v (%v); want %v containing %q", err, errkind.Of(err), c.kind, c.wantErr)
			}
		})
	}
}

// A value JSON cannot encode (NaN) is a 500 with the error envelope, never
// a 200 with an empty body.
func TestWriteRefusesNaN(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusOK, map[string]float64{"p50": math.NaN()})
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"code":"internal"`) {
		t.Fatalf("Write(NaN) = %d %q, want 500 with the internal error envelope", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	Write(rec, http.StatusCreated, map[string]float64{"p50": 1.5})
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"p50": 1.5`) {
		t.Fatalf("Write = %d %q", rec.Code, rec.Body.String())
	}
}
