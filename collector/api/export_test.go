package api

// ErrorCodes lists every code an error answer can carry, for the external
// tests that hold openapi.json to them.
func ErrorCodes() []string {
	codes := []string{codeMethodNotAllowed, codeUnsupportedMedia}
	for _, a := range answers {
		codes = append(codes, a.code)
	}
	return codes
}
