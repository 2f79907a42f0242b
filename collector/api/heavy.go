package api

import (
	"net/http"

	"github.com/nbs-project/nbs/collector/httpjson"
)

// Admission admits heavy reads (collector/readlimit.Limiter): it takes
// slots for the caller in r's context, or answers an error of kind
// Overloaded, with a Retry-After, past the caller's or the collector's
// limit.
type Admission interface {
	Admit(r *http.Request, slots int) (release func(), err error)
}

// ReportSlots is what a report holds of its caller's heavy-read slots
// (--reads.max-per-caller): it reads up to six rollup ranges at once and
// can cover hundreds of node-days, where a series or a page of evidence
// reads one metric of one node.
const ReportSlots = 4

// readSlots is what a route costs in heavy-read slots; 0 for a route that
// is not a heavy read. Those routes read on the read pool
// (collector/store.Reads); the others answer from the primary's small,
// indexed lookups and are never refused for load.
func readSlots(method, pattern string) int {
	if method != http.MethodGet {
		return 0
	}
	switch pattern {
	case "/reports":
		return ReportSlots
	case "/nodes/{node}/series", "/nodes/{node}/events":
		return 1
	case "/export/metrics":
		// Every node in the caller's scope, every scrape interval.
		return 2
	case "/flows", "/flows/edge":
		// The rollups of every edge of the caller's nodes over the window,
		// and the address holders that resolve their peers.
		return 2
	case "/nodes/{node}/series/batch":
		// Up to maxBatchMetrics metrics of one node: one rollup read, or
		// (steps under a minute) one raw read per metric.
		return 2
	}
	return 0
}

// pastTreeSlots is what a tree of a past time costs (?at=, ?from=&to=): it
// reads the rollups of its window, where the live tree reads one row.
const pastTreeSlots = 1

// admitHeavy puts the heavy routes of routes behind adm, and the tree's
// past-time reads.
func admitHeavy(routes []Route, adm Admission) {
	for i, rt := range routes {
		slots := readSlots(rt.Method, rt.Pattern)
		pastTree := rt.Method == http.MethodGet && rt.Pattern == "/nodes/{node}/tree"
		if slots == 0 && !pastTree {
			continue
		}
		next := rt.Handler
		routes[i].Handler = func(w http.ResponseWriter, r *http.Request) {
			slots := slots
			if pastTree {
				q := r.URL.Query()
				if !q.Has("at") && !q.Has("from") && !q.Has("to") {
					next(w, r)
					return
				}
				slots = pastTreeSlots
			}
			release, err := adm.Admit(r, slots)
			if err != nil {
				httpjson.WriteError(w, r, err, nil)
				return
			}
			defer release()
			next(w, r)
		}
	}
}
