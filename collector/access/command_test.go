package access

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestTokenCommand(t *testing.T) {
	pool := testPool(t)
	opened := 0
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		cmd := TokenCommand{
			Open: func(_ context.Context, url string) (*pgxpool.Pool, func(), error) {
				if url != "postgres://test" {
					return nil, nil, errors.New("wrong url " + url)
				}
				opened++
				return pool, func() {}, nil
			},
			Stdout: &out, Stderr: &errOut,
			Getenv: func(k string) string {
				if k == "NBS_DB_URL" {
					return "postgres://test"
				}
				return ""
			},
		}
		code := cmd.Run(context.Background(), args)
		return code, out.String(), errOut.String()
	}

	// The first token, before any exists: only the secret on stdout.
	code, out, errOut := run("create", "--name", "first-admin", "--role", "admin")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	secret := strings.TrimSuffix(out, "\n")
	if !wellFormedToken(secret) || strings.Count(out, "\n") != 1 {
		t.Fatalf("stdout %q is not one token", out)
	}
	if !strings.Contains(errOut, `"first-admin" (role admin)`) || !strings.Contains(errOut, "shown only this once") {
		t.Errorf("stderr %q", errOut)
	}
	a, _ := newTestAccess(t, pool, Config{})
	p, err := a.Verify(context.Background(), secret)
	if err != nil || p.Role != RoleAdmin {
		t.Fatalf("the created token: %+v %v", p, err)
	}

	code, _, errOut = run("create", "--db.url", "postgres://test", "--name", "acme", "--role", "customer", "--selector", "customer=acme", "--expires", "2h")
	if code != 0 || !strings.Contains(errOut, "nodes customer=acme") {
		t.Fatalf("create customer: %d %s", code, errOut)
	}
	code, out, errOut = run("list")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "first-admin") ||
		!strings.Contains(lines[2], "customer=acme") || !strings.Contains(lines[1], "cli:") || strings.Contains(out, secret[4:]) {
		t.Errorf("list:\n%s", out)
	}

	code, _, errOut = run("revoke", "--name", "first-admin")
	if code != 0 || !strings.Contains(errOut, `revoked token 1 "first-admin"`) {
		t.Fatalf("revoke: %d %s", code, errOut)
	}
	if _, err := a.Verify(context.Background(), secret); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a revoked token works: %v", err)
	}
	if code, _, errOut = run("revoke", "--id", "2"); code != 0 {
		t.Errorf("revoke --id: %d %s", code, errOut)
	}
	if code, _, errOut = run("revoke", "--name", "first-admin"); code != 1 || !strings.Contains(errOut, "no live token") {
		t.Errorf("revoking twice by name: %d %s", code, errOut)
	}
	if audited, err := a.AuditLog(context.Background(), AuditQuery{ObjectKind: "token"}); err != nil || len(audited) != 4 ||
		audited[0].ActorKind != "cli" || audited[0].Role != "admin" {
		t.Errorf("audit of the command: %+v %v", audited, err)
	}

	opened = 0
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: nbs-collector token"},
		{[]string{"rotate"}, 2, `unknown command "rotate"`},
		{[]string{"create", "--name", "x"}, 2, `role ""`},
		{[]string{"create", "--name", "x", "--role", "customer"}, 2, "needs a selector"},
		{[]string{"create", "--name", "x", "--role", "viewer", "--expires", "soon"}, 2, "--expires"},
		{[]string{"create", "--name", "x", "--role", "viewer", "--selector", "customer"}, 2, "--selector"},
		{[]string{"create", "--name", "x", "--role", "viewer", "--auth.token-max-ttl", "1h", "--auth.token-ttl", "2h"}, 2, "--auth.token-ttl 2h0m0s"},
		{[]string{"create", "--name", "x", "--role", "viewer", "--expires", "400d"}, 2, "must be from 1m to 8760h"},
		{[]string{"revoke"}, 2, "either --id or --name"},
		{[]string{"revoke", "--id", "1", "--name", "x"}, 2, "either --id or --name"},
		{[]string{"list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"list", "--db.url", "postgres://elsewhere"}, 1, "wrong url"},
	} {
		code, _, errOut := run(bad.args...)
		if code != bad.code || !strings.Contains(errOut, bad.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q", bad.args, code, errOut, bad.code, bad.want)
		}
	}
	if opened != 0 {
		// Usage errors are found before connecting.
		t.Errorf("bad usage opened the database %d times", opened)
	}
}
