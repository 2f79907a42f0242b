package api

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/internal/schema"
)

// Every query parameter of the read routes comes from a client: each parser
// refuses what it cannot use with an error, and what it accepts lies within
// the documented bounds.
func FuzzQueryParams(f *testing.F) {
	f.Add("2026-03-01T10:00:00+01:00", "1772366400000", "10s", "5m", "100", "tcp_reset/sent", "web-1")
	f.Add("", "", "", "", "", "", "")
	f.Add("-1", "253402300800000", "0s", "1ns", "0", "TCP", "no spaces")
	f.Add("2026-03-01T11:00:00.5Z", "9999-12-31T23:59:59.999Z", "9600h", "24h", "1000", "*", "a.b_c-d")
	f.Add("0000-01-01T00:00:00Z", "x", "-5m", "25h", "1e3", "tcp_reset//sent", "")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, from, to, step, window, limit, metric, node string) {
		if tm, err := parseTime(from); err == nil {
			if ms := tm.UnixMilli(); ms < minTimeMS || ms > maxTimeMS {
				t.Fatalf("parseTime(%q) = %s, outside the documented range", from, tm)
			}
			back, err := parseTime(tm.UTC().Format(time.RFC3339Nano))
			if err != nil || !back.Equal(tm) {
				t.Fatalf("parseTime(%q) = %s does not round-trip: %s, %v", from, tm, back, err)
			}
		}
		f0, t0, err := timeRange(from, to, defaultRange, now)
		if err == nil {
			if !f0.Before(t0) || t0.Sub(f0) > maxRange {
				t.Fatalf("timeRange(%q, %q) = %s..%s", from, to, f0, t0)
			}
			st, err := parseStep(step, time.Second, f0, t0)
			if err == nil && (st <= 0 || t0.Sub(f0)/st > maxPoints) {
				t.Fatalf("parseStep(%q) over %s = %s: %d points", step, t0.Sub(f0), st, t0.Sub(f0)/st)
			}
		}
		if w, err := parseWindow(window); err == nil && (w < time.Second || w > maxWindow) {
			t.Fatalf("parseWindow(%q) = %s", window, w)
		}
		if n, err := parseLimit(limit); err == nil && (n < 1 || n > maxLimit) {
			t.Fatalf("parseLimit(%q) = %d", limit, n)
		}
		r := httptest.NewRequest("GET", "/api/v1/x?metric="+url.QueryEscape(metric), nil)
		rctx := chi.NewRouteContext()
		rctx.URLParams.Add("node", node)
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		if m, err := metricParam(r); err == nil && (m != metric || !schema.ValidID(m)) {
			t.Fatalf("metricParam(%q) = %q", metric, m)
		}
		if n, err := NodeParam(r); err == nil && (n != schema.CanonicalNodeName(node) || !schema.ValidNodeName(n) || n != strings.ToLower(n)) {
			t.Fatalf("NodeParam(%q) = %q", node, n)
		}
	})
}
