package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func nodes(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = nodesMain(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestNodesCommand(t *testing.T) {
	db := pgcluster.Database(t)
	credFile := filepath.Join(t.TempDir(), "web-1.credential")
	steps := []struct {
		args       []string
		code       int
		out, err   string // fragments expected
		checkState string // web-1's state in the listing afterwards
	}{
		{[]string{"enroll", "web-1", "--db.url", db}, 0, "nbsn1_", "shown once", "enrolled"},
		{[]string{"enroll", "--db.url", db, "web-1"}, 1, "", "already enrolled", "enrolled"},
		{[]string{"enroll", "web-1", "--replace", "--out", credFile, "--db.url", db}, 0, "", "written to", "enrolled"},
		{[]string{"revoke", "web-1", "--db.url", db}, 0, "web-1 revoked", "", "revoked"},
		{[]string{"reenroll", "web-1", "--db.url", db}, 0, "may enroll again", "", "not_enrolled"},
		{[]string{"reenroll", "web-1", "--db.url", db}, 1, "", "neither enrolled nor revoked", "not_enrolled"},
		{[]string{"delete", "web-1", "--db.url", db}, 1, "", "web-1: no such node", "not_enrolled"},
		{[]string{"enroll", "bad name", "--db.url", db}, 1, "", "invalid node name", ""},
		{[]string{"revoke", "--db.url", db}, 2, "", "want one node name", ""},
		{[]string{"list", "extra", "--db.url", db}, 2, "", "want no arguments", ""},
		{[]string{"frobnicate", "--db.url", db}, 2, "", "unknown command", ""},
		{[]string{"list", "--db.url", ""}, 2, "", "--db.url (or env NBS_DB_URL) is required", ""},
	}
	for _, s := range steps {
		code, out, errOut := nodes(t, s.args...)
		if code != s.code || !strings.Contains(out, s.out) || !strings.Contains(errOut, s.err) {
			t.Errorf("nodes %q: exit %d, stdout %q, stderr %q; want exit %d, %q, %q", s.args, code, out, errOut, s.code, s.out, s.err)
		}
		if s.checkState == "" {
			continue
		}
		_, out, _ = nodes(t, "list", "--json", "--db.url", db)
		var l struct{ Nodes []nodeauth.NodeIdentity }
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("list --json: %v: %s", err, out)
		}
		state := "not_enrolled"
		for _, n := range l.Nodes {
			if n.Node == "web-1" {
				state = n.State
			}
		}
		if state != s.checkState {
			t.Errorf("after %q: web-1 is %s, want %s", s.args, state, s.checkState)
		}
	}
	b, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeauth.ParseCredential(strings.TrimSpace(string(b))); err != nil {
		t.Errorf("--out file holds %q: %v", b, err)
	}
	if fi, _ := os.Stat(credFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("--out file mode %v, want 0600", fi.Mode().Perm())
	}
	code, out, _ := nodes(t, "list", "--db.url", db)
	if code != 0 || !strings.Contains(out, "NODE") {
		t.Errorf("list: exit %d, %q", code, out)
	}
}

// An operator reserves a name for a tenant and sets tenants' node quotas
// from the command line.
func TestNodesReserveAndQuota(t *testing.T) {
	db := pgcluster.Database(t)
	steps := []struct {
		args     []string
		code     int
		out, err string // fragments expected
	}{
		{[]string{"reserve", "globex-db-1", "customer=globex", "--db.url", db}, 0, `globex-db-1 reserved for customer=globex (tenant "globex")`, ""},
		{[]string{"reserve", "globex-db-1", "customer=acme", "--db.url", db}, 1, "", "has labels bound already"},
		{[]string{"reserve", "db-2", "rack=r1", "--db.url", db}, 1, "", "must name the tenant"},
		{[]string{"quota", "set", "acme", "500", "--db.url", db}, 0, `tenant "acme" may register at most 500 nodes`, ""},
		{[]string{"quota", "set", "acme", "lots", "--db.url", db}, 1, "", `node quota "lots" is not a whole number`},
		{[]string{"quota", "set", "acme", "16777217", "--db.url", db}, 1, "", "must be from 0 (no new node) to 16777216"},
		{[]string{"quota", "set", "", "5", "--db.url", db}, 1, "", "empty is no tenant"},
		{[]string{"quota", "set", "acme", "--db.url", db}, 2, "", "want a tenant and its node quota"},
		{[]string{"quota", "list", "--db.url", db}, 0, "acme    0      500", ""},
		{[]string{"quota", "remove", "acme", "--db.url", db}, 0, "has --ingest.max-nodes-per-tenant again", ""},
		{[]string{"quota", "remove", "acme", "--db.url", db}, 1, "", `tenant "acme" has no node quota of its own`},
	}
	for _, s := range steps {
		code, out, errOut := nodes(t, s.args...)
		if code != s.code || !strings.Contains(out, s.out) || !strings.Contains(errOut, s.err) {
			t.Errorf("nodes %q: exit %d, stdout %q, stderr %q; want exit %d, %q, %q", s.args, code, out, errOut, s.code, s.out, s.err)
		}
	}
	_, out, _ := nodes(t, "list", "--json", "--db.url", db)
	if !strings.Contains(out, `"node": "globex-db-1"`) || !strings.Contains(out, `"customer": "globex"`) {
		t.Errorf("list after reserve: %s; want globex-db-1 bound to globex", out)
	}
}
