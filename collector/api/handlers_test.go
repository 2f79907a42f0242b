package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/api"
)

// TestNodeRoutes answers the node routes from a fake store and holds every
// answer, success or error, to openapi.json.
func TestNodeRoutes(t *testing.T) {
	doc := loadDoc(t)
	now := time.Now()
	st := newFakeStore(now)
	router, _ := server(t, st)
	hour := fmt.Sprint(now.Add(-time.Hour).UnixMilli())
	// huge is past the route table's bound on every parameter (checkParams);
	// long is within it, so the handler's own bound answers.
	huge := strings.Repeat("9", 200000)
	long := strings.Repeat("9", 2000)
	cases := []struct {
		name, target string
		pattern      string // as in openapi.json
		status       int
		want         string // in the body
	}{
		{"fleet", "/nodes", "/nodes", 200, `"name": "web-1"`},
		{"node", "/nodes/web-1", "/nodes/{node}", 200, `"connected": true`},
		{"node with a clock ahead", "/nodes/web-1", "/nodes/{node}", 200, `"clock_offset_ms": 3000,
  "clock_skewed": true`},
		{"node without a stream has no clock offset", "/nodes/idle", "/nodes/{node}", 200, `"clock_offset_ms": null,
  "clock_skewed": false`},
		{"node that never reported", "/nodes/idle", "/nodes/{node}", 200, `"last_report": null`},
		{"unknown node", "/nodes/nope", "/nodes/{node}", 404, `node \"nope\": not found`},
		{"not a node name", "/nodes/-x", "/nodes/{node}", 400, "is not a node name"},
		{"huge node name", "/nodes/" + strings.Repeat("n", 100000), "/nodes/{node}", 400, "at most 16384"},
		{"long node name", "/nodes/" + strings.Repeat("n", 2000), "/nodes/{node}", 400, "is not a node name"},
		{"tree", "/nodes/web-1/tree", "/nodes/{node}/tree", 200, `"recent_state": "crit"`},
		{"tree with window", "/nodes/web-1/tree?window=1h", "/nodes/{node}/tree", 200, `"window_s": 3600`},
		{"tree before the first report", "/nodes/idle/tree", "/nodes/{node}/tree", 200, `"roots": []`},
		{"tree with a window too long", "/nodes/web-1/tree?window=48h", "/nodes/{node}/tree", 400, "from 1s to 24h"},
		{"rate series", "/nodes/web-1/series?metric=tcp_reset/sent/no_socket&from=" + hour, "/nodes/{node}/series", 200, `"count": 20`},
		{"histogram series", "/nodes/web-1/series?metric=latency&step=1m", "/nodes/{node}/series", 200, `"percentiles"`},
		{"series of an unknown metric", "/nodes/web-1/series?metric=nope", "/nodes/{node}/series", 404, "not found"},
		{"series without metric", "/nodes/web-1/series", "/nodes/{node}/series", 400, "metric is required"},
		{"series from=9e15", "/nodes/web-1/series?metric=tcp_reset&from=9e15", "/nodes/{node}/series", 400, `from: \"9e15\" is neither`},
		{"series from=-9e15", "/nodes/web-1/series?metric=tcp_reset&from=-9e15", "/nodes/{node}/series", 400, `from: \"-9e15\" is neither`},
		{"series from in year 287 thousand", "/nodes/web-1/series?metric=tcp_reset&from=9000000000000000", "/nodes/{node}/series", 400, "outside 1970-01-01 to 9999-12-31"},
		{"series to in year 287 thousand", "/nodes/web-1/series?metric=tcp_reset&to=9000000000000000", "/nodes/{node}/series", 400, "outside 1970-01-01 to 9999-12-31"},
		{"series before 1970", "/nodes/web-1/series?metric=tcp_reset&from=-9000000000000000", "/nodes/{node}/series", 400, "outside 1970-01-01"},
		{"series over 400 days", "/nodes/web-1/series?metric=tcp_reset&from=0", "/nodes/{node}/series", 400, "longer than 400 days"},
		{"series with a huge from", "/nodes/web-1/series?metric=tcp_reset&from=" + huge, "/nodes/{node}/series", 400, "at most 16384"},
		{"series with a long from", "/nodes/web-1/series?metric=tcp_reset&from=" + long, "/nodes/{node}/series", 400, "longer than 64 bytes"},
		{"series with a huge metric", "/nodes/web-1/series?metric=" + strings.Repeat("a/", 100000), "/nodes/{node}/series", 400, "at most 16384"},
		{"series with a long metric", "/nodes/web-1/series?metric=" + strings.Repeat("a/", 1000), "/nodes/{node}/series", 400, "is not a metric id"},
		{"series with a huge step", "/nodes/web-1/series?metric=tcp_reset&step=" + huge + "h", "/nodes/{node}/series", 400, "step"},
		{"series with a step too long", "/nodes/web-1/series?metric=tcp_reset&step=100000h", "/nodes/{node}/series", 400, "step"},
		{"events", "/nodes/web-1/events?metric=tcp_reset&limit=5", "/nodes/{node}/events", 200, `"saddr": "10.0.0.1"`},
		{"events with a glob", "/nodes/web-1/events?metric=tcp_reset/*", "/nodes/{node}/events", 400, "is not a metric id"},
		{"events with limit 0", "/nodes/web-1/events?metric=tcp_reset&limit=0", "/nodes/{node}/events", 400, "from 1 to 1000"},
		{"events with a huge limit", "/nodes/web-1/events?metric=tcp_reset&limit=" + huge, "/nodes/{node}/events", 400, "at most 16384"},
		{"events with a long limit", "/nodes/web-1/events?metric=tcp_reset&limit=" + long, "/nodes/{node}/events", 400, "from 1 to 1000"},
		{"events with from after to", "/nodes/web-1/events?metric=tcp_reset&from=2000&to=1000", "/nodes/{node}/events", 400, "must be before to"},
		{"events of an unknown node", "/nodes/nope/events?metric=tcp_reset", "/nodes/{node}/events", 404, "not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := do(t, router, "GET", api.Prefix+c.target, "")
			body := w.Body.String()
			if w.Code != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("GET %.80s: HTTP %d %.500s; want %d with %q", c.target, w.Code, body, c.status, c.want)
			}
			if len(body) > 2000 && w.Code >= 400 {
				t.Errorf("error answer is %d bytes; a huge parameter must not come back in full", len(body))
			}
			if err := doc.CheckResponse("GET", c.pattern, w.Code, w.Body.Bytes()); err != nil {
				t.Error(err)
			}
			if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
		})
	}

	// series asks for tcp_reset over an hour two hours ago with step.
	from, to := now.Add(-2*time.Hour).Truncate(time.Millisecond), now.Add(-time.Hour).Truncate(time.Millisecond)
	series := func(t *testing.T, step string) api.Series {
		t.Helper()
		q := url.Values{"metric": {"tcp_reset"}, "from": {from.UTC().Format(time.RFC3339Nano)}, "to": {fmt.Sprint(to.UnixMilli())}, "step": {step}}
		w := do(t, router, "GET", api.Prefix+"/nodes/web-1/series?"+q.Encode(), "")
		var s api.Series
		if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || w.Code != 200 {
			t.Fatalf("HTTP %d %s", w.Code, w.Body)
		}
		return s
	}
	t.Run("the asked range and step reach the store", func(t *testing.T) {
		s := series(t, "90s")
		if !st.asked.from.Equal(from) || !st.asked.to.Equal(to) || st.asked.step != 90*time.Second || s.StepMS != 90000 {
			t.Errorf("store asked %v..%v step %v, answer step_ms %d; want %v..%v 90s", st.asked.from, st.asked.to, st.asked.step, s.StepMS, from, to)
		}
		// A rate's step: 20 over 10 s is 2/s; a step no report carried is OK.
		if len(s.Points) != 2 || *s.Points[0].Value != 2 || s.Points[0].State != "warn" || s.Points[1].State != "ok" {
			t.Errorf("points %+v", s.Points)
		}
	})

	t.Run("a step of whole minutes is read from minute rollups", func(t *testing.T) {
		s := series(t, "5m")
		// Steps start at a minute, the rollups' boundary.
		if start := from.Truncate(time.Minute).Add(time.Minute); !st.asked.from.Equal(start) || !s.From.Equal(start) || !st.asked.to.Equal(to) || s.StepMS != 300000 {
			t.Errorf("store asked %v..%v, answer from %v step_ms %d; want %v..%v 5m", st.asked.from, st.asked.to, s.From, s.StepMS, start, to)
		}
		// The fake's one bucket: 6 reports carried the root, 12 resets
		// over their 60 s.
		if len(s.Points) != 1 || *s.Points[0].Value != 0.2 || *s.Points[0].Count != 12 || s.Points[0].State != "ok" {
			t.Errorf("points %+v", s.Points)
		}
	})
}

// TestRouting: what is outside the table, and what the table does with a
// path it lacks or a method it does not have.
func TestRouting(t *testing.T) {
	doc := loadDoc(t)
	st := newFakeStore(time.Now())
	router, routes := server(t, st)
	cases := []struct {
		method, target string
		status         int
		want           string // in the body
		allow          string
	}{
		{"GET", "/healthz", 200, `"ok"`, ""},
		{"GET", "/readyz", 200, `"ready"`, ""},
		{"GET", "/metrics", 200, "nbs_collector_http_requests_total", ""},
		{"GET", "/", 200, "UI", ""},
		{"GET", "/fleet/web-1", 200, "UI", ""},
		{"GET", api.Prefix + "/nope", 404, `"no API route GET /api/v1/nope: not found"`, ""},
		{"GET", api.Prefix, 404, `"not_found"`, ""},
		{"GET", api.Prefix + "/" + strings.Repeat("x", 10000), 404, "…", ""},
		{"DELETE", api.Prefix + "/nodes", 405, `"method_not_allowed"`, "GET"},
		{"PATCH", api.Prefix + "/alert-rules/1", 405, "PATCH is not allowed on /api/v1/alert-rules/1; use GET or PUT or DELETE", "GET, PUT, DELETE"},
		{"POST", api.Prefix + "/thresholds", 405, `"method_not_allowed"`, "GET, PUT"},
		{"GET", api.Prefix + "/nodes/web-1/expand", 405, `"method_not_allowed"`, "POST"},
	}
	for _, c := range cases {
		w := do(t, router, c.method, c.target, "")
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) || w.Header().Get("Allow") != c.allow {
			t.Errorf("%s %.60s: HTTP %d Allow %q %.300s; want %d Allow %q with %q", c.method, c.target, w.Code, w.Header().Get("Allow"), w.Body, c.status, c.allow, c.want)
		}
		if strings.HasPrefix(c.target, api.Prefix) {
			if err := doc.CheckValue(map[string]any{"$ref": "#/components/schemas/ErrorBody"}, decode(t, w.Body.Bytes())); err != nil {
				t.Errorf("%s %.60s: %v", c.method, c.target, err)
			}
		}
	}

	// Each route of the table reaches its own handler.
	for _, rt := range routes {
		target := api.Prefix + strings.NewReplacer("{node}", "web-1", "{id}", "7").Replace(rt.Pattern)
		if strings.HasSuffix(rt.Pattern, "/series") || strings.HasSuffix(rt.Pattern, "/events") || strings.HasSuffix(rt.Pattern, "/batch") {
			target += "?metric=tcp_reset"
		}
		w := do(t, router, rt.Method, target, "")
		if w.Code >= 300 {
			t.Errorf("%s %s: HTTP %d %s", rt.Method, target, w.Code, w.Body)
		}
	}
	for _, c := range []struct{ method, target, handler string }{
		{"PUT", "/thresholds", "PutOverride"}, {"DELETE", "/thresholds/3", "DeleteOverride"},
		{"GET", "/nodes/web-1/thresholds", "NodeThresholds"}, {"POST", "/nodes/web-1/expand", "ExpandNode"},
		{"POST", "/alert-rules", "CreateRule"}, {"PUT", "/alert-rules/3", "PutRule"}, {"GET", "/alerts/3", "GetAlert"},
	} {
		if w := do(t, router, c.method, api.Prefix+c.target, ""); w.Body.String() != c.handler {
			t.Errorf("%s %s reached %q, want %s", c.method, c.target, w.Body, c.handler)
		}
	}

	st.pingErr = errors.New("connection refused")
	if w := do(t, router, "GET", "/readyz", ""); w.Code != 503 || !strings.Contains(w.Body.String(), `"unavailable"`) {
		t.Errorf("readyz without a database: HTTP %d %s", w.Code, w.Body)
	}
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %.200s", err, b)
	}
	return v
}
