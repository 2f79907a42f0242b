package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// admission records what it is asked and refuses when told to.
type admission struct {
	mu       sync.Mutex
	asked    []int // slots, per Admit
	released int
	refuse   bool
}

func (a *admission) Admit(_ *http.Request, slots int) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, slots)
	if a.refuse {
		return nil, errkind.WithRetryAfter(errkind.Errorf(errkind.Overloaded, "too many heavy reads in flight for this caller"), 2*time.Second)
	}
	return func() { a.mu.Lock(); a.released++; a.mu.Unlock() }, nil
}

// The heavy reads — reports, series, evidence — are admitted, at their
// cost in slots, and released once answered; nothing else is. A refused
// one answers 429 with Retry-After and never reaches its handler.
func TestHeavyRoutesAreAdmitted(t *testing.T) {
	adm := &admission{}
	acc := noAccess(t)
	a := api.New(newFakeStore(time.Now()), live{"web-1": true}, answer("UI"), slog.New(slog.DiscardHandler), telemetry.New())
	routes := api.Routes(api.Parts{Nodes: a, NodeConfig: stubParts{}, Alerts: stubParts{}, Identities: stubParts{},
		Access: stubParts{}, Reports: stubParts{}, Export: stubParts{}, Admission: adm})
	h := a.Handler(routes, acc)
	cases := []struct {
		path  string
		slots int // 0: not admitted
	}{
		{"/api/v1/reports?selector=customer%3Dacme", api.ReportSlots},
		{"/api/v1/nodes/web-1/series?metric=tcp_reset", 1},
		{"/api/v1/nodes/web-1/events?metric=tcp_reset", 1},
		{"/api/v1/nodes", 0},
		{"/api/v1/nodes/web-1", 0},
		{"/api/v1/nodes/web-1/tree", 0},
		{"/api/v1/nodes/web-1/tree?at=" + fmt.Sprint(time.Now().Add(-time.Hour).UnixMilli()), 1}, // a past tree reads rollups
		{"/api/v1/nodes/web-1/series/batch?metric=tcp_reset&metric=latency", 2},
		{"/api/v1/report-definitions", 0},
		{"/api/v1/whoami", 0},
		{"/api/v1/thresholds", 0},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			*adm = admission{}
			w := do(t, h, "GET", c.path, "")
			if w.Code != http.StatusOK {
				t.Fatalf("HTTP %d %s", w.Code, w.Body)
			}
			switch {
			case c.slots == 0 && len(adm.asked) != 0:
				t.Errorf("admitted with %v; it is not a heavy read", adm.asked)
			case c.slots != 0 && (len(adm.asked) != 1 || adm.asked[0] != c.slots || adm.released != 1):
				t.Errorf("admitted %v, released %d; want [%d] and released once", adm.asked, adm.released, c.slots)
			}
			if c.slots == 0 {
				return
			}
			*adm = admission{refuse: true}
			w = do(t, h, "GET", c.path, "")
			var body httpjson.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusTooManyRequests || body.Error.Code != "too_many_requests" {
				t.Fatalf("refused: HTTP %d %s, want 429 too_many_requests", w.Code, w.Body)
			}
			if ra := w.Header().Get("Retry-After"); ra != "2" {
				t.Errorf("Retry-After %q, want 2", ra)
			}
		})
	}
}

// openapi.json documents 429 and 504 on exactly the heavy reads, and 429
// on the login too (collector/access's failed sign-in limit).
func TestHeavyRoutesDocumented(t *testing.T) {
	adm := &admission{}
	a := api.New(newFakeStore(time.Now()), live{}, nil, slog.New(slog.DiscardHandler), telemetry.New())
	routes := api.Routes(api.Parts{Nodes: a, NodeConfig: stubParts{}, Alerts: stubParts{}, Identities: stubParts{},
		Access: stubParts{}, Reports: stubParts{}, Export: stubParts{}, Admission: adm})
	heavy := map[string]bool{"GET /reports": true, "GET /nodes/{node}/series": true, "GET /nodes/{node}/events": true,
		"GET /nodes/{node}/series/batch": true, "GET /nodes/{node}/tree": true}
	signIn := map[string]bool{"POST /login": true}
	ops := loadDoc(t).Operations()
	for _, rt := range routes {
		key := rt.Method + " " + rt.Pattern
		responses, _ := ops[key]["responses"].(map[string]any)
		for code, want := range map[string]bool{"429": heavy[key] || signIn[key], "504": heavy[key]} {
			if _, ok := responses[code]; ok != want {
				t.Errorf("%s documents %s: %v, want %v", key, code, ok, want)
			}
		}
	}
}
