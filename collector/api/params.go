package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/internal/schema"
)

// What a client may ask of the read routes; everything past these is a 400
// that says the limit.
const (
	maxRange      = 400 * 24 * time.Hour // from..to
	defaultRange  = time.Hour
	maxPoints     = 2000 // a series answer; longer ranges get coarser steps
	defaultLimit  = 100  // events
	maxLimit      = 1000
	defaultWindow = 5 * time.Minute // the tree's recent_* fields
	maxWindow     = 24 * time.Hour
	// Times are Unix milliseconds or RFC 3339 from the epoch up to the last
	// instant RFC 3339 can write; PostgreSQL stores all of them.
	minTimeMS  = 0
	maxTimeMS  = 253402300799999 // 9999-12-31T23:59:59.999Z
	maxTimeLen = 64
	// Every string parameter of every route, before its handler parses it
	// (checkParams): the longest any route takes is a report's targets.
	MaxParamBytes  = 16 << 10
	MaxParamValues = 256 // query values of one request, all names together
)

// checkParams refuses, before any handler of the table runs, a request
// whose query or path parameters no route could use: a query string that
// is not URL encoding, more than MaxParamValues values, or a name or value
// that is not valid UTF-8, holds a control character (NUL among them,
// which PostgreSQL refuses in text) or is longer than MaxParamBytes. The
// answer is a 400 naming the parameter. Each handler's own parsing then
// applies its parameter's narrower bounds; none can forget these.
func checkParams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := RequestParams(r); err != nil {
			httpjson.WriteError(w, r, err, nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RequestParams checks a request's parameters as checkParams does: the
// path parameters of its route (as handlers read them, chi.URLParam) and
// its query.
func RequestParams(r *http.Request) error {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		for i, k := range rctx.URLParams.Keys {
			if i < len(rctx.URLParams.Values) {
				if err := paramValue("path parameter "+k, rctx.URLParams.Values[i]); err != nil {
					return err
				}
			}
		}
	}
	return QueryParams(r.URL.RawQuery)
}

// QueryParams checks a raw query string (see checkParams).
func QueryParams(raw string) error {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return invalid("the query string is not URL encoding (name=value&…, escapes as %%XX): %v", clipErr(err))
	}
	names := make([]string, 0, len(q))
	n := 0
	for k, vs := range q {
		names = append(names, k)
		n += len(vs)
	}
	if n > MaxParamValues {
		return invalid("the query has %d values; at most %d", n, MaxParamValues)
	}
	slices.Sort(names) // the same request gets the same message
	for _, k := range names {
		if err := paramValue("a query parameter's name", k); err != nil {
			return err
		}
		for _, v := range q[k] {
			if err := paramValue("query parameter "+k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// paramValue checks one name or value; what names it.
func paramValue(what, v string) error {
	if len(v) > MaxParamBytes {
		return invalid("%s is %d bytes; at most %d", what, len(v), MaxParamBytes)
	}
	if !utf8.ValidString(v) {
		return invalid("%s %s is not valid UTF-8", what, Quote(v))
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return invalid("%s %s holds a control character (byte 0x%02x at %d); none is allowed", what, Quote(v), c, i)
		}
	}
	return nil
}

// clipErr is an error's text, shortened as Quote shortens a value.
func clipErr(err error) string {
	const n = 120
	s := err.Error()
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// Quote quotes what a client sent for an error message, shortened so a huge
// parameter does not come back in full.
func Quote(s string) string {
	const n = 64
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:n]) + "…"
}

func invalid(format string, args ...any) error {
	return errkind.Errorf(errkind.Invalid, format, args...)
}

// parseTime reads RFC 3339 or Unix milliseconds.
func parseTime(s string) (time.Time, error) {
	var t time.Time
	if len(s) > maxTimeLen {
		return t, fmt.Errorf("%s is longer than %d bytes; give RFC 3339 (2026-01-02T15:04:05Z) or Unix milliseconds", Quote(s), maxTimeLen)
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < minTimeMS || ms > maxTimeMS {
			return t, fmt.Errorf("%d Unix milliseconds is outside 1970-01-01 to 9999-12-31", ms)
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("%s is neither RFC 3339 (2026-01-02T15:04:05Z) nor Unix milliseconds", Quote(s))
	}
	if ms := t.UnixMilli(); ms < minTimeMS || ms > maxTimeMS {
		return t, fmt.Errorf("%s is outside 1970-01-01 to 9999-12-31", Quote(s))
	}
	return t, nil
}

// timeRange parses from and to; to defaults to now and from to def before
// to. The range must be non-empty and at most maxRange long.
func timeRange(fromS, toS string, def time.Duration, now time.Time) (time.Time, time.Time, error) {
	to := now
	if toS != "" {
		t, err := parseTime(toS)
		if err != nil {
			return to, to, invalid("to: %v", err)
		}
		to = t
	}
	from := to.Add(-def)
	if fromS != "" {
		t, err := parseTime(fromS)
		if err != nil {
			return from, to, invalid("from: %v", err)
		}
		from = t
	}
	if !from.Before(to) {
		return from, to, invalid("from (%s) must be before to (%s)", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	if to.Sub(from) > maxRange {
		return from, to, invalid("range %s to %s is longer than %d days", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), int(maxRange/(24*time.Hour)))
	}
	return from, to, nil
}

// parseStep reads a series' step; unset, it is the node's interval. A step
// that would give more than maxPoints points is made coarser: a whole
// number of minutes or hours once it is longer than one.
func parseStep(s string, interval time.Duration, from, to time.Time) (time.Duration, error) {
	step := max(interval, time.Millisecond)
	if s != "" {
		var err error
		if step, err = time.ParseDuration(s); err != nil || step <= 0 || step > maxRange {
			return 0, invalid("step %s must be a duration from 1ms to %dd written like 10s, 5m or 24h", Quote(s), int(maxRange/(24*time.Hour)))
		}
	}
	if minStep := to.Sub(from) / maxPoints; step < minStep {
		step = minStep.Round(time.Second) + time.Second
		// Whole minutes or hours, so that a long range is read from
		// rollups (seriesRollup) rather than from every report.
		for _, unit := range []time.Duration{time.Hour, time.Minute} {
			if step > unit {
				step = (step + unit - 1) / unit * unit
				break
			}
		}
	}
	return step, nil
}

// parseWindow reads the tree's recent window.
func parseWindow(s string) (time.Duration, error) {
	if s == "" {
		return defaultWindow, nil
	}
	w, err := time.ParseDuration(s)
	if err != nil || w < time.Second || w > maxWindow {
		return 0, invalid("window %s must be a duration from 1s to 24h, e.g. 5m", Quote(s))
	}
	return w, nil
}

// parseLimit reads a limit from 1 to maxLimit.
func parseLimit(s string) (int, error) {
	if s == "" {
		return defaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, invalid("limit %s must be an integer from 1 to %d", Quote(s), maxLimit)
	}
	return n, nil
}

// metricParam reads the required ?metric= of series and events.
func metricParam(r *http.Request) (string, error) {
	m := r.URL.Query().Get("metric")
	switch {
	case m == "":
		return "", invalid("query parameter metric is required, e.g. metric=tcp_reset")
	case !schema.ValidID(m):
		return "", invalid("metric %s is not a metric id like tcp_reset/sent/no_socket", Quote(m))
	}
	return m, nil
}

// NodeParam reads the {node} of a route in its canonical form
// (schema.CanonicalNodeName: /nodes/NODE-A is node-a); a name no agent
// could have is a 400, not a lookup.
func NodeParam(r *http.Request) (string, error) {
	n, err := schema.NormalizeNodeName(chi.URLParam(r, "node"))
	if err != nil {
		return "", invalid("node %s is not a node name (letters, digits, '.', '_', '-'; at most 253)", Quote(chi.URLParam(r, "node")))
	}
	return n, nil
}

// ParseTime reads a time parameter as every route does: RFC 3339 or Unix
// milliseconds (for handlers outside this package, such as reports).
func ParseTime(s string) (time.Time, error) { return parseTime(s) }
