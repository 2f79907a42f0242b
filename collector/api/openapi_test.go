package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
)

// TestOpenAPIMatchesRouter walks the router the collector serves and holds
// it to openapi.json both ways: a route the document lacks, or a documented
// route the router lacks, fails (prometheus' openapi coverage tests do the
// same for theirs).
func TestOpenAPIMatchesRouter(t *testing.T) {
	doc := loadDoc(t)
	router, _ := server(t, newFakeStore(time.Now()))
	served := map[string]bool{}
	err := chi.Walk(router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if rest, ok := strings.CutPrefix(route, api.Prefix+"/"); ok {
			served[method+" /"+rest] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for key := range doc.Operations() {
		documented[key] = true
	}
	if len(served) < 25 {
		t.Fatalf("walked only %d routes under %s: %v", len(served), api.Prefix, served)
	}
	for _, key := range sortedKeys(served) {
		if !documented[key] {
			t.Errorf("%s is served but not in openapi.json", key)
		}
	}
	for _, key := range sortedKeys(documented) {
		if !served[key] {
			t.Errorf("%s is in openapi.json but not served", key)
		}
	}
}

// TestRouteTable checks what access control relies on: every route has a
// role that fits its method, the document states the same role and scope,
// and a {node} route is scoped to the caller's nodes.
func TestRouteTable(t *testing.T) {
	doc := loadDoc(t)
	ops := doc.Operations()
	_, routes := server(t, newFakeStore(time.Now()))
	seen := map[string]bool{}
	ids := map[string]bool{}
	public := map[string]bool{"POST /login": true, "POST /logout": true} // a session starts and ends without one
	for _, rt := range routes {
		key := rt.Method + " " + rt.Pattern
		if seen[key] {
			t.Errorf("%s is in the table twice", key)
		}
		seen[key] = true
		switch {
		case public[key]:
			if rt.Role != access.RolePublic {
				t.Errorf("%s: role %s, want public", key, rt.Role)
			}
		case rt.Role == access.RolePublic:
			t.Errorf("%s is public; only %v may be", key, sortedKeys(public))
		case rt.Method == http.MethodGet && rt.Role == access.RoleOperator:
			t.Errorf("%s: a read needs at most viewer (or admin, for secrets), not operator", key)
		case rt.Method != http.MethodGet && rt.Role != access.RoleOperator && rt.Role != access.RoleAdmin:
			t.Errorf("%s: role %s; a change needs operator or admin", key, rt.Role)
		}
		// A customer may call viewer routes that are scoped, and must find
		// nothing of another tenant's there; a {node} read not scoped would
		// be the one door left open.
		if strings.Contains(rt.Pattern, "{node}") && rt.Role == access.RoleViewer && !rt.Scoped {
			t.Errorf("%s names a node but is not scoped to the caller's nodes", key)
		}
		if rt.Handler == nil {
			t.Errorf("%s has no handler", key)
		}
		op, ok := ops[key]
		if !ok {
			continue // TestOpenAPIMatchesRouter says so
		}
		if got := op["x-nbs-role"]; got != string(rt.Role) {
			t.Errorf("%s: openapi.json says x-nbs-role %v, the table %v", key, got, rt.Role)
		}
		if got, _ := op["x-nbs-scoped"].(bool); got != rt.Scoped {
			t.Errorf("%s: openapi.json says x-nbs-scoped %v, the table %v", key, got, rt.Scoped)
		}
		id, _ := op["operationId"].(string)
		if id == "" || ids[id] {
			t.Errorf("%s: operationId %q is empty or taken", key, id)
		}
		ids[id] = true
		responses, _ := op["responses"].(map[string]any)
		if _, ok := responses["default"]; !ok {
			t.Errorf("%s documents no default (error) response", key)
		}
		// What access control answers must be documented too.
		var want []string
		if rt.Role != access.RolePublic {
			want = append(want, "401", "403")
			if rt.Role != access.RoleCustomer && (rt.Role != access.RoleViewer || !rt.Scoped) {
				want = append(want, "404") // to a customer, a route it may not call does not exist
			}
		}
		if rt.Method != http.MethodGet {
			want = append(want, "403", "415") // cross-origin, not JSON
		}
		for _, code := range want {
			if _, ok := responses[code]; !ok {
				t.Errorf("%s does not document %s", key, code)
			}
		}
		if _, ok := op["security"]; rt.Role == access.RolePublic && !ok {
			t.Errorf("%s is public but does not say so (security: [])", key)
		}
	}
}

// TestOpenAPIServed: the collector serves the committed document as is.
func TestOpenAPIServed(t *testing.T) {
	router, _ := server(t, newFakeStore(time.Now()))
	w := do(t, router, "GET", api.Prefix+"/openapi.json", "")
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || !bytes.Equal(w.Body.Bytes(), onDisk) {
		t.Fatalf("GET openapi.json: HTTP %d %s, %d bytes; want 200 and the %d bytes of openapi.json", w.Code, w.Header().Get("Content-Type"), w.Body.Len(), len(onDisk))
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(onDisk, &doc); err != nil || doc.OpenAPI != "3.0.3" || len(doc.Servers) != 1 || doc.Servers[0].URL != api.Prefix {
		t.Errorf("openapi.json: %+v, %v; want OpenAPI 3.0.3 served at %s", doc, err, api.Prefix)
	}
}

// TestErrorCodesDocumented: the document lists exactly the codes an error
// answer can carry.
func TestErrorCodesDocumented(t *testing.T) {
	doc := loadDoc(t)
	s, ok := doc.Schema("ErrorDetail")
	if !ok {
		t.Fatal("no ErrorDetail schema")
	}
	var documented []string
	for _, c := range s["properties"].(map[string]any)["code"].(map[string]any)["enum"].([]any) {
		documented = append(documented, c.(string))
	}
	codes := api.ErrorCodes()
	sort.Strings(documented)
	sort.Strings(codes)
	if !slices.Equal(documented, codes) {
		t.Errorf("openapi.json error codes %v, the API's %v", documented, codes)
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
