// Package apitest holds the collector's HTTP answers to its OpenAPI document
// (collector/api/openapi.json) in tests: a response's status must be
// documented for its route, and its body must match the schema, with no
// field the schema does not name. It knows the part of JSON Schema the
// document uses: $ref, allOf, type, nullable, required, properties,
// additionalProperties, items, enum, minimum, maximum, format date-time.
package apitest

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/api"
)

// Doc is a parsed OpenAPI document.
type Doc struct {
	root map[string]any
}

// Load parses the API's own document.
func Load() (*Doc, error) { return Parse(api.OpenAPI()) }

// Parse parses an OpenAPI document in JSON.
func Parse(raw []byte) (*Doc, error) {
	var root map[string]any
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	if _, ok := root["paths"].(map[string]any); !ok {
		return nil, fmt.Errorf("OpenAPI document has no paths")
	}
	return &Doc{root: root}, nil
}

var methods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

// Operations returns every documented operation by "METHOD /pattern".
func (d *Doc) Operations() map[string]map[string]any {
	out := map[string]map[string]any{}
	for path, item := range d.root["paths"].(map[string]any) {
		item, _ := item.(map[string]any)
		for _, m := range methods {
			if op, ok := item[m].(map[string]any); ok {
				out[strings.ToUpper(m)+" "+path] = op
			}
		}
	}
	return out
}

// Param is one documented parameter of an operation.
type Param struct {
	Name string
	In   string // "path" or "query"
}

// Parameters returns the documented parameters of "METHOD /pattern": the
// path item's and the operation's, $refs resolved.
func (d *Doc) Parameters(route string) []Param {
	method, pattern, _ := strings.Cut(route, " ")
	item, _ := d.root["paths"].(map[string]any)[pattern].(map[string]any)
	op, _ := item[strings.ToLower(method)].(map[string]any)
	var out []Param
	for _, list := range []any{item["parameters"], op["parameters"]} {
		for _, p := range asSlice(list) {
			m, _ := p.(map[string]any)
			m = d.resolve(m)
			name, _ := m["name"].(string)
			in, _ := m["in"].(string)
			out = append(out, Param{Name: name, In: in})
		}
	}
	return out
}

// Schema returns a named schema of the components.
func (d *Doc) Schema(name string) (map[string]any, bool) {
	s, ok := d.lookup("#/components/schemas/" + name)
	return s, ok
}

// StaffFields returns the names of the schemas' properties marked
// x-nbs-staff: what only staff may see, so no answer to a customer may
// carry a field of that name.
func (d *Doc) StaffFields() []string {
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if props, ok := x["properties"].(map[string]any); ok {
				for name, ps := range props {
					if m, ok := ps.(map[string]any); ok && m["x-nbs-staff"] == true {
						seen[name] = true
					}
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(d.root["components"])
	walk(d.root["paths"])
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// CheckResponse checks an answer to method on pattern (as in the document,
// e.g. /nodes/{node}) against the document.
func (d *Doc) CheckResponse(method, pattern string, status int, body []byte) error {
	op, ok := d.Operations()[strings.ToUpper(method)+" "+pattern]
	if !ok {
		return fmt.Errorf("%s %s is not in the document", method, pattern)
	}
	responses, _ := op["responses"].(map[string]any)
	resp, ok := responses[strconv.Itoa(status)].(map[string]any)
	if !ok {
		if status < 500 {
			return fmt.Errorf("%s %s: status %d is not documented", method, pattern, status)
		}
		if resp, ok = responses["default"].(map[string]any); !ok {
			return fmt.Errorf("%s %s: status %d is not documented and there is no default", method, pattern, status)
		}
	}
	resp = d.resolve(resp)
	content, _ := resp["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	if media == nil {
		if len(strings.TrimSpace(string(body))) > 0 {
			return fmt.Errorf("%s %s %d: documented without a body, got %.200s", method, pattern, status, body)
		}
		return nil
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s %s %d: body is not JSON: %v", method, pattern, status, err)
	}
	schema, _ := media["schema"].(map[string]any)
	if problems := d.check(schema, v, "$"); len(problems) > 0 {
		return fmt.Errorf("%s %s %d does not match the document:\n  %s", method, pattern, status, strings.Join(problems, "\n  "))
	}
	return nil
}

// CheckValue checks a decoded JSON value against a schema of the document.
func (d *Doc) CheckValue(schema map[string]any, v any) error {
	if problems := d.check(schema, v, "$"); len(problems) > 0 {
		return fmt.Errorf("does not match the document:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

func (d *Doc) lookup(ref string) (map[string]any, bool) {
	var cur any = d.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur = m[part]
	}
	m, ok := cur.(map[string]any)
	return m, ok
}

func (d *Doc) resolve(s map[string]any) map[string]any {
	for i := 0; i < 16; i++ {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		r, ok := d.lookup(ref)
		if !ok {
			return map[string]any{"x-broken-ref": ref}
		}
		s = r
	}
	return s
}

// flatten merges allOf into one schema: the union of properties and
// required, so a field of any part is known to the whole.
func (d *Doc) flatten(s map[string]any) map[string]any {
	s = d.resolve(s)
	all, ok := s["allOf"].([]any)
	if !ok {
		return s
	}
	out := map[string]any{}
	props := map[string]any{}
	var required []any
	for k, v := range s {
		if k != "allOf" {
			out[k] = v
		}
	}
	for _, part := range all {
		p, _ := part.(map[string]any)
		p = d.flatten(p)
		for k, v := range p {
			switch k {
			case "properties":
				for name, ps := range v.(map[string]any) {
					props[name] = ps
				}
			case "required":
				required = append(required, v.([]any)...)
			default:
				if _, set := out[k]; !set {
					out[k] = v
				}
			}
		}
	}
	if len(props) > 0 {
		out["properties"] = props
	}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}

func (d *Doc) check(schema map[string]any, v any, at string) []string {
	if schema == nil {
		return []string{at + ": no schema"}
	}
	s := d.flatten(schema)
	if ref, ok := s["x-broken-ref"]; ok {
		return []string{fmt.Sprintf("%s: $ref %v resolves to nothing", at, ref)}
	}
	if v == nil {
		if s["nullable"] == true {
			return nil
		}
		return []string{at + ": null, but the schema is not nullable"}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, at+": "+fmt.Sprintf(format, args...)) }
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || e == v
		}
		if !found {
			bad("%v is not one of %v", v, enum)
		}
	}
	switch typ, _ := s["type"].(string); typ {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			bad("want an object, got %T", v)
			break
		}
		for _, r := range asSlice(s["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				bad("required field %s is missing", r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		for _, k := range sortedKeys(obj) {
			if ps, ok := props[k].(map[string]any); ok {
				problems = append(problems, d.check(ps, obj[k], at+"."+k)...)
				continue
			}
			switch addl := s["additionalProperties"].(type) {
			case map[string]any:
				problems = append(problems, d.check(addl, obj[k], at+"."+k)...)
			case nil:
				if props != nil { // a free-form object has neither
					bad("field %s is not in the document", k)
				}
			case bool:
				if !addl {
					bad("field %s is not allowed", k)
				}
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			bad("want an array, got %T", v)
			break
		}
		items, _ := s["items"].(map[string]any)
		for i, e := range arr {
			problems = append(problems, d.check(items, e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("want a string, got %T", v)
			break
		}
		if s["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				bad("%q is not an RFC 3339 date-time", str)
			}
		}
	case "integer", "number":
		n, ok := v.(float64)
		if !ok {
			bad("want a number, got %T", v)
			break
		}
		if typ == "integer" && n != math.Trunc(n) {
			bad("%v is not an integer", n)
		}
		if lo, ok := s["minimum"].(float64); ok && n < lo {
			bad("%v is below the minimum %v", n, lo)
		}
		if hi, ok := s["maximum"].(float64); ok && n > hi {
			bad("%v is above the maximum %v", n, hi)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, got %T", v)
		}
	case "":
		// any value
	default:
		bad("schema type %q is not known to apitest", typ)
	}
	return problems
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
