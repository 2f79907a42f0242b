package api

import (
	_ "embed"
	"net/http"
)

// openAPI describes every route of the table, hand-written; the tests hold
// it to the router and the handlers' answers, and the UI's types
// (web/src/api.gen.ts) are generated from it.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3 document.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// ServeOpenAPI serves GET /openapi.json.
func ServeOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
