package api

import "github.com/nbs-project/nbs/collector/httpjson"

// ErrorCodes lists every code an error answer can carry, for the external
// tests that hold openapi.json to them.
func ErrorCodes() []string {
	return append([]string{codeMethodNotAllowed}, httpjson.Codes()...)
}
