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
	if len(served) < 18 {
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

// TestRouteTable checks what authentication will rely on: every route has
// a role, the document states the same, and the node scope follows {node}.
func TestRouteTable(t *testing.T) {
	doc := loadDoc(t)
	ops := doc.Operations()
	_, routes := server(t, newFakeStore(time.Now()))
	seen := map[string]bool{}
	ids := map[string]bool{}
	for _, rt := range routes {
		key := rt.Method + " " + rt.Pattern
		if seen[key] {
			t.Errorf("%s is in the table twice", key)
		}
		seen[key] = true
		want := api.RoleWrite
		if rt.Method == http.MethodGet {
			want = api.RoleRead
		}
		if rt.Role != want {
			t.Errorf("%s: role %v, want %v", key, rt.Role, want)
		}
		if rt.NodeScoped != strings.Contains(rt.Pattern, "{node}") {
			t.Errorf("%s: NodeScoped %v, but the pattern %s {node}", key, rt.NodeScoped, map[bool]string{true: "has", false: "has no"}[!rt.NodeScoped])
		}
		if rt.Handler == nil {
			t.Errorf("%s has no handler", key)
		}
		op, ok := ops[key]
		if !ok {
			continue // TestOpenAPIMatchesRouter says so
		}
		if got := op["x-nbs-role"]; got != rt.Role.String() {
			t.Errorf("%s: openapi.json says x-nbs-role %v, the table %v", key, got, rt.Role)
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
