package access

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/tenant"
)

// TokenCommand is `nbs-collector token create|list|revoke`: it works on the
// database directly, so the first admin token can be made before any
// exists, and from a machine where no collector runs.
type TokenCommand struct {
	// Open connects to the database and brings its schema up to date.
	Open           func(ctx context.Context, dbURL string) (*pgxpool.Pool, func(), error)
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Log            *slog.Logger
}

const tokenUsage = `usage: nbs-collector token <command> [flags]

  create --name NAME --role ROLE [--selector customer=acme] [--expires 720h]
         makes a token and prints it on stdout, this once (roles: viewer,
         operator, admin, customer; a customer needs --selector)
  list   prints every token without secrets
  revoke --id ID | --name NAME
         ends a token and its logins at once

Every command takes --db.url (or env NBS_DB_URL).
`

// Run runs the command with its arguments (after "token") and returns the
// exit code: 0 done, 1 failed, 2 bad usage.
func (c TokenCommand) Run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(c.Stderr, tokenUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	fs := flag.NewFlagSet("nbs-collector token "+args[0], flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	dbURL := fs.String("db.url", c.Getenv("NBS_DB_URL"), "PostgreSQL URL (env NBS_DB_URL)")
	var cfg Config
	var run func(context.Context, *Access) error
	check := func() error { return nil } // usage errors, found before connecting
	switch args[0] {
	case "create":
		name := fs.String("name", "", "token name (who or what holds it), e.g. alice or ci-deploy")
		role := fs.String("role", "", "viewer, operator, admin or customer")
		sel := fs.String("selector", "", "a customer's nodes, e.g. customer=acme or customer=acme,region=eu")
		expires := fs.String("expires", "", "how long the token works, e.g. 720h or 90d (default --auth.token-ttl)")
		fs.DurationVar(&cfg.TokenTTL, "auth.token-ttl", DefaultTokenTTL, "expiry of a token created without --expires")
		fs.DurationVar(&cfg.TokenMaxTTL, "auth.token-max-ttl", DefaultTokenMaxTTL, "longest expiry a token may be given")
		fs.IntVar(&cfg.MaxTokens, "auth.max-tokens", DefaultMaxTokens, "most live tokens")
		cfg.Tenant = tenant.DefaultKey
		cfg.Tenant.RegisterFlag(fs)
		var n NewToken
		check = func() error {
			var err error
			n, err = newTokenFromFlags(*name, *role, *sel, *expires)
			if err != nil {
				return err
			}
			return n.validate(cfg.withDefaults())
		}
		run = func(ctx context.Context, a *Access) error { return c.create(ctx, a, n) }
	case "list":
		run = c.list
	case "revoke":
		id := fs.Int64("id", 0, "id of the token to revoke (from token list)")
		name := fs.String("name", "", "name of the token to revoke")
		check = func() error {
			if (*id == 0) == (*name == "") || *id < 0 {
				return invalid("give either --id or --name (a token id from token list)")
			}
			return nil
		}
		run = func(ctx context.Context, a *Access) error { return c.revoke(ctx, a, *id, *name) }
	default:
		fmt.Fprintf(c.Stderr, "nbs-collector token: unknown command %q\n\n%s", args[0], tokenUsage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.Stderr, "nbs-collector token %s: unexpected argument %q\n", args[0], fs.Arg(0))
		return 2
	}
	cfg = cfg.withDefaults()
	if err := errors.Join(cfg.Validate(), check()); err != nil {
		fmt.Fprintf(c.Stderr, "nbs-collector token %s: %v\n", args[0], err)
		return 2
	}
	if *dbURL == "" {
		fmt.Fprintln(c.Stderr, "nbs-collector token: --db.url (or env NBS_DB_URL) is required")
		return 2
	}
	pool, closePool, err := c.Open(ctx, *dbURL)
	if err != nil {
		fmt.Fprintf(c.Stderr, "nbs-collector token: %v\n", err)
		return 1
	}
	defer closePool()
	a, err := New(pool, cfg, c.Log)
	if err != nil {
		fmt.Fprintf(c.Stderr, "nbs-collector token: %v\n", err)
		return 1
	}
	if err := run(WithPrincipal(ctx, CLIPrincipal()), a); err != nil {
		fmt.Fprintf(c.Stderr, "nbs-collector token %s: %v\n", args[0], err)
		if errors.Is(err, ErrInvalid) {
			return 2
		}
		return 1
	}
	return 0
}

// CLIPrincipal is who a command of nbs-collector acts as in created_by and
// the audit log: the operating-system user on this host.
func CLIPrincipal() Principal {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return Principal{Name: name, Role: RoleAdmin, Via: ViaCLI}
}

func newTokenFromFlags(name, role, sel, expires string) (NewToken, error) {
	n := NewToken{Name: name, Role: Role(role)}
	var err error
	if n.Selector, err = ParseSelector(sel); err != nil {
		return n, invalid("--selector: %v", err)
	}
	if expires != "" {
		if n.TTL, err = ParseTTL(expires); err != nil {
			return n, invalid("--expires: %v", err)
		}
	}
	return n, nil
}

func (c TokenCommand) create(ctx context.Context, a *Access, n NewToken) error {
	secret, t, err := a.CreateToken(ctx, n)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.Stdout, secret)
	scope := ""
	if len(t.Selector) > 0 {
		scope = ", nodes " + t.Selector.String()
	}
	fmt.Fprintf(c.Stderr, "created token %d %q (role %s%s), expires %s.\nIt is shown only this once: keep it now.\n",
		t.ID, t.Name, t.Role, scope, t.ExpiresAt.Local().Format(time.RFC3339))
	return nil
}

func (c TokenCommand) list(ctx context.Context, a *Access) error {
	ts, err := a.Tokens(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tSELECTOR\tSTATE\tEXPIRES\tLAST USED\tCREATED BY\tHINT")
	for _, t := range ts {
		last := "never"
		if t.LastUsedAt != nil {
			last = t.LastUsedAt.Local().Format(time.DateTime)
		}
		sel := t.Selector.String()
		if sel == "" {
			sel = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t…%s\n", t.ID, t.Name, t.Role, sel, t.State,
			t.ExpiresAt.Local().Format(time.DateTime), last, t.CreatedBy, t.Hint)
	}
	return tw.Flush()
}

func (c TokenCommand) revoke(ctx context.Context, a *Access, id int64, name string) error {
	if id > 0 {
		t, err := a.RevokeToken(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stderr, "revoked token %d %q\n", t.ID, t.Name)
		return nil
	}
	ts, err := a.RevokeTokensNamed(ctx, name)
	if err != nil {
		return err
	}
	if len(ts) == 0 {
		return fmt.Errorf("no live token named %q: %w", name, ErrNotFound)
	}
	for _, t := range ts {
		fmt.Fprintf(c.Stderr, "revoked token %d %q\n", t.ID, t.Name)
	}
	return nil
}
