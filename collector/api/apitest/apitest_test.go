package apitest

import (
	"strings"
	"testing"
)

const miniDoc = `{
  "openapi": "3.0.3",
  "paths": {
    "/things/{id}": {
      "get": {"responses": {
        "200": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Detail"}}}},
        "404": {"$ref": "#/components/responses/Err"},
        "default": {"$ref": "#/components/responses/Err"}
      }},
      "delete": {"responses": {"204": {"description": ""}}}
    }
  },
  "components": {
    "responses": {"Err": {"description": "", "content": {"application/json": {"schema": {"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}}}}}},
    "schemas": {
      "Thing": {"type": "object", "required": ["id", "state", "at"], "properties": {
        "id": {"type": "integer", "minimum": 1},
        "state": {"type": "string", "enum": ["ok", "crit"]},
        "at": {"type": "string", "format": "date-time"},
        "value": {"type": "number", "nullable": true},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "next": {"allOf": [{"$ref": "#/components/schemas/Thing"}], "nullable": true}
      }},
      "Detail": {"allOf": [{"$ref": "#/components/schemas/Thing"}, {"type": "object", "required": ["log"], "properties": {"log": {"type": "array", "items": {"type": "boolean"}}}}]}
    }
  }
}`

func TestCheckResponse(t *testing.T) {
	doc, err := Parse([]byte(miniDoc))
	if err != nil {
		t.Fatal(err)
	}
	good := `{"id": 1, "state": "ok", "at": "2026-01-02T15:04:05Z", "value": null, "labels": {"a": "b"}, "tags": ["x"],
		"next": {"id": 2, "state": "crit", "at": "2026-01-02T15:04:05.5+01:00"}, "log": [true]}`
	cases := []struct {
		name, method string
		status       int
		body         string
		want         string // "" = matches
	}{
		{"matches", "GET", 200, good, ""},
		{"null where nullable", "GET", 200, `{"id": 1, "state": "ok", "at": "2026-01-02T15:04:05Z", "next": null, "log": []}`, ""},
		{"error answer", "GET", 404, `{"code": "not_found"}`, ""},
		{"5xx falls back to default", "GET", 503, `{"code": "unavailable"}`, ""},
		{"no body", "DELETE", 204, ``, ""},
		{"undocumented status", "GET", 409, `{"code": "conflict"}`, "status 409 is not documented"},
		{"undocumented route", "PUT", 200, `{}`, "is not in the document"},
		{"missing required, from allOf", "GET", 200, `{"id": 1, "state": "ok", "at": "2026-01-02T15:04:05Z"}`, "required field log is missing"},
		{"unknown field", "GET", 200, strings.Replace(good, `"log"`, `"logs": [], "log"`, 1), "field logs is not in the document"},
		{"enum", "GET", 200, strings.Replace(good, `"ok"`, `"fine"`, 1), "fine is not one of"},
		{"integer", "GET", 200, strings.Replace(good, `"id": 1`, `"id": 1.5`, 1), "1.5 is not an integer"},
		{"minimum", "GET", 200, strings.Replace(good, `"id": 1`, `"id": 0`, 1), "below the minimum"},
		{"date-time", "GET", 200, strings.Replace(good, `"2026-01-02T15:04:05Z"`, `"yesterday"`, 1), "not an RFC 3339 date-time"},
		{"null where not nullable", "GET", 200, strings.Replace(good, `"labels": {"a": "b"}`, `"labels": null`, 1), "$.labels: null"},
		{"map values", "GET", 200, strings.Replace(good, `{"a": "b"}`, `{"a": 1}`, 1), "$.labels.a: want a string"},
		{"array items", "GET", 200, strings.Replace(good, `[true]`, `["yes"]`, 1), "$.log[0]: want a boolean"},
		{"nested", "GET", 200, strings.Replace(good, `"crit"`, `"down"`, 1), "$.next.state"},
		{"body where none is documented", "DELETE", 204, `{}`, "documented without a body"},
		{"not JSON", "GET", 200, `<html>`, "not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := doc.CheckResponse(c.method, "/things/{id}", c.status, []byte(c.body))
			switch {
			case c.want == "" && err != nil:
				t.Errorf("unexpected: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestStaffFields(t *testing.T) {
	doc, err := Parse([]byte(`{"paths": {}, "components": {"schemas": {
		"A": {"type": "object", "properties": {"holder": {"type": "string", "x-nbs-staff": true}, "name": {"type": "string"}}},
		"B": {"allOf": [{"type": "object", "properties": {"created_by": {"type": "string", "x-nbs-staff": true}, "open": {"type": "string", "x-nbs-staff": false}}}]}
	}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(doc.StaffFields(), ","); got != "created_by,holder" {
		t.Errorf("staff fields %q, want created_by,holder", got)
	}
}
