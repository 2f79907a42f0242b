package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/api"
)

// FuzzStringParams sends what a client may put in a path parameter and a
// query string to routes of every kind (a node's evidence, the fleet, whose
// q and label reach PostgreSQL, and the audit log's stub): nothing is ever
// a 5xx, and what the shared check refuses (not URL encoding, not UTF-8, a
// control character such as NUL, too long, too many values) is a 400 that
// names the parameter, whatever the handler would have done with it.
func FuzzStringParams(f *testing.F) {
	f.Add("web-1", "metric=tcp_reset&limit=10")
	f.Add("web-1", "q=web&label=customer%3Dacme&state=warn")
	f.Add("a\x00b", "q=a%00b")
	f.Add("\xff", "label=%FF%FE&object_kind=%00")
	f.Add("web-1", "q=a;b&%zz")
	f.Add(strings.Repeat("n", 300), "metric="+strings.Repeat("a/", 300))
	f.Add("web-1", "object_kind=threshold%0A&since=0")
	var (
		once sync.Once
		h    chi.Router
	)
	f.Fuzz(func(t *testing.T, node, query string) {
		once.Do(func() { h, _ = server(t, newFakeStore(time.Now())) })
		pathBad := len(node) > api.MaxParamBytes || !utf8.ValidString(node) || strings.ContainsFunc(node, func(r rune) bool { return r < 0x20 || r == 0x7f })
		queryBad := api.QueryParams(query) != nil
		for _, target := range []struct {
			path     string
			withNode bool
		}{
			{"/api/v1/nodes/" + node + "/events", true},
			{"/api/v1/fleet", false},
			{"/api/v1/audit", false},
		} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.URL.Path, r.URL.RawPath, r.URL.RawQuery = target.path, "", query
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			body := w.Body.String()
			if w.Code >= 500 {
				t.Fatalf("GET %q ? %q: %d %s", target.path, query, w.Code, body)
			}
			// A node holding '/' is another path (or none): only a
			// {node} the route got is the route's to refuse.
			routed := target.withNode && !strings.Contains(node, "/") && node != ""
			if (queryBad || (routed && pathBad)) && w.Code != 404 {
				if w.Code != 400 || !(strings.Contains(body, "parameter") || strings.Contains(body, "query")) {
					t.Fatalf("GET %q ? %q: %d %.300s; want a 400 naming the parameter", target.path, query, w.Code, body)
				}
			}
		}
	})
}
