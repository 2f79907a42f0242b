package push

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadReceivers(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		file  string
		flags []string
		// want is a part of the error; "" for none.
		want string
	}{
		{name: "yaml", file: "- name: prom\n  url: http://127.0.0.1:9090/api/v1/write\n  match: region=eu\n  headers: {x-scope-orgid: acme}\n  bearer_token_file: " + token + "\n  version: \"2.0\"\n  timeout: 10s\n"},
		{name: "json", file: `[{"name": "prom", "url": "https://mimir/api/v1/push"}, {"name": "otel", "type": "otlp", "url": "http://otel:4318/v1/metrics"}]`},
		{name: "flag", flags: []string{`{name: prom, url: "http://p:9090/api/v1/write"}`}},
		{name: "misspelt field", file: "- name: prom\n  urll: http://p/api/v1/write\n", want: "field urll not found"},
		{name: "bad url", file: "- name: prom\n  url: ftp://p/\n", want: `receiver 1 (prom): url "ftp://p/"`},
		{name: "bad name", file: "- name: Prom/1\n  url: http://p/\n", want: "name \"Prom/1\""},
		{name: "bad type", file: "- name: p\n  type: kafka\n  url: http://p/\n", want: "type \"kafka\""},
		{name: "bad version", file: "- name: p\n  url: http://p/\n  version: \"3\"\n", want: "version \"3\""},
		{name: "bad match", file: "- name: p\n  url: http://p/\n  match: region\n", want: "match: selector"},
		{name: "reserved header", file: "- name: p\n  url: http://p/\n  headers: {authorization: x}\n", want: "headers: Authorization is set by the collector"},
		{name: "header with newline", file: "- name: p\n  url: http://p/\n  headers: {x-a: \"b\\nc\"}\n", want: "headers: X-A: value"},
		{name: "missing token file", file: "- name: p\n  url: http://p/\n  bearer_token_file: /nonexistent\n", want: "bearer_token_file"},
		{name: "short timeout", file: "- name: p\n  url: http://p/\n  timeout: 10ms\n", want: "timeout 10ms: must be from 1s"},
		{name: "credentials in url", file: "- name: p\n  url: http://u:pw@p/\n", want: "must not hold credentials"},
		{name: "same name", file: "- {name: p, url: \"http://p/\"}\n- {name: p, url: \"http://q/\"}\n", want: "receiver 2 (p): name \"p\": used by another"},
		{name: "same name in flag", file: "- {name: p, url: \"http://p/\"}\n", flags: []string{`{name: p, url: "http://q/"}`}, want: "--export.receiver 1 (p): name \"p\""},
		{name: "too many", file: strings.Repeat("- {url: \"http://p/\"}\n", MaxReceivers+1), want: "at most 16"},
		{name: "not a list", file: "name: p\n", want: "cannot unmarshal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.file != "" {
				cfg.ReceiversFile = filepath.Join(t.TempDir(), "receivers.yaml")
				if err := os.WriteFile(cfg.ReceiversFile, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg.Receivers = tc.flags
			rs, err := cfg.LoadReceivers()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) == 0 {
					t.Fatal("no receivers")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestLoadReceiversValues(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.ReceiversFile = filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(cfg.ReceiversFile, []byte("- name: prom\n  url: http://p/api/v1/write\n  headers: {x-scope-orgid: acme}\n  timeout: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Receivers = []string{`{"name": "q", "url": "http://q/", "version": "2.0"}`}
	rs, err := cfg.LoadReceivers()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Type != "remote_write" || rs[0].Timeout != 10*time.Second || rs[0].Headers["X-Scope-Orgid"] != "acme" ||
		rs[1].Version != "2.0" || rs[1].Timeout != DefaultTimeout {
		t.Fatalf("receivers %+v", rs)
	}
}
