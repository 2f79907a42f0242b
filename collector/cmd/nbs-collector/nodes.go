package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/tenant"
)

const nodesUsage = `usage: nbs-collector nodes COMMAND [flags] [NODE] [LABELS]

Commands on node identities and tenancy, run against the database (a
running collector ends the affected node's stream at once):

  list              every node name: enrolled, revoked or not enrolled, its
                    bound labels and tenant, what its Hello claimed otherwise,
                    and when and from where it last proved its identity
  enroll NODE       bind NODE to a new node credential and print it once, for a
                    node without a bootstrap token or to rotate a credential
                    (--replace for an enrolled node; --out FILE writes it 0600;
                    --labels customer=acme binds its tenant too)
  label NODE LABELS bind LABELS (k=v,...; "" for none) to NODE, its tenant among
                    them: they replace whatever its agent says for those keys.
                    A new tenant starts a new history: what the node reported
                    before stays visible to its old tenant only
  reserve NODE LABELS
                    keep the name NODE for LABELS' tenant (customer=globex)
                    before any node has it: another tenant's bootstrap token
                    cannot enroll it, and the reservation does not expire
                    (label NODE "" releases it)
  revoke NODE       end NODE's stream; nothing may report under the name (no
                    credential, certificate or bootstrap token) until re-enrolled
  reenroll NODE     forget NODE's credential or revocation: the next Hello with
                    a bootstrap token enrolls it with a new credential
  delete NODE       delete NODE's data, credential and labels (a revocation stays)

  bootstrap create --name NAME --labels customer=acme [--expires 30d] [--max-nodes N]
                    a tenant's bootstrap token, printed once: it enrolls new
                    node names into those labels (its tenant) and no other
  bootstrap list    the tenant bootstrap tokens
  bootstrap revoke --name NAME

  quota set TENANT N
                    TENANT (a value of the tenant label) may register at most
                    N nodes (0: no new one), instead of
                    --ingest.max-nodes-per-tenant; its nodes beyond it stay
  quota list        the quotas set, with each tenant's nodes
  quota remove TENANT
                    TENANT has --ingest.max-nodes-per-tenant again

Flags:
`

func nodesMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nbs-collector nodes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, nodesUsage)
		fs.PrintDefaults()
	}
	dbURL := fs.String("db.url", os.Getenv("NBS_DB_URL"), "PostgreSQL URL (env NBS_DB_URL)")
	replace := fs.Bool("replace", false, "enroll: replace the credential of an enrolled node")
	out := fs.String("out", "", "enroll: write the credential to this file (mode 0600) instead of standard output")
	asJSON := fs.Bool("json", false, "list, bootstrap list, quota list: print JSON")
	labelsFlag := fs.String("labels", "", "enroll, bootstrap create: labels to bind (k=v,...), e.g. customer=acme")
	name := fs.String("name", "", "bootstrap create, revoke: the token's name")
	expires := fs.String("expires", "", "bootstrap create: how long the token works, e.g. 72h or 30d (default 30d, at most 365d)")
	maxNodes := fs.Int("max-nodes", 0, "bootstrap create: most names the token may enroll, 1 to 16777216 (default 1000)")
	key := tenant.Key(tenant.DefaultKey)
	key.RegisterFlag(fs)
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	cmd := args[0]
	if (cmd == "bootstrap" || cmd == "quota") && len(args) > 1 {
		cmd, args = cmd+" "+args[1], args[1:]
	}
	// Flags may come before or after the node name.
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var rest []string
	for fs.NArg() > 0 {
		rest = append(rest, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
	}
	want := map[string]int{"list": 0, "enroll": 1, "label": 2, "reserve": 2, "revoke": 1, "reenroll": 1, "delete": 1,
		"bootstrap create": 0, "bootstrap list": 0, "bootstrap revoke": 0, "quota set": 2, "quota list": 0, "quota remove": 1}
	n, known := want[cmd]
	switch {
	case !known:
		fmt.Fprintf(stderr, "nbs-collector nodes: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	case len(rest) != n:
		what := map[int]string{0: "no arguments", 1: "one node name", 2: "a node name and its labels (k=v,...)"}[n]
		if cmd == "quota set" || cmd == "quota remove" {
			what = map[int]string{1: "a tenant", 2: "a tenant and its node quota"}[n]
		}
		fmt.Fprintf(stderr, "nbs-collector nodes %s: want %s\n", cmd, what)
		return 2
	case (cmd == "bootstrap create" || cmd == "bootstrap revoke") && *name == "":
		fmt.Fprintf(stderr, "nbs-collector nodes %s: --name is required\n", cmd)
		return 2
	case *dbURL == "":
		fmt.Fprintln(stderr, "nbs-collector nodes: --db.url (or env NBS_DB_URL) is required")
		return 2
	}
	var labels access.Selector
	var err error
	labelSpec, labelsGiven := *labelsFlag, *labelsFlag != ""
	if cmd == "label" || cmd == "reserve" {
		labelSpec, labelsGiven = rest[1], true
	}
	if labelsGiven {
		if labels, err = access.ParseSelector(labelSpec); err != nil {
			fmt.Fprintf(stderr, "nbs-collector nodes %s: labels: %v\n", cmd, err)
			return 2
		}
	}
	var ttl time.Duration
	if *expires != "" {
		if ttl, err = access.ParseTTL(*expires); err != nil {
			fmt.Fprintf(stderr, "nbs-collector nodes %s: --expires: %v\n", cmd, err)
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(access.WithPrincipal(context.Background(), access.CLIPrincipal()), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := store.Open(ctx, *dbURL, log)
	if err != nil {
		fmt.Fprintf(stderr, "nbs-collector nodes: %v\n", err)
		return 1
	}
	defer st.Close()
	admin := nodeauth.NewAdmin(st, nil, "", key, log)

	var node string
	if n > 0 {
		node = rest[0]
	}
	switch cmd {
	case "list":
		err = listNodes(ctx, admin, stdout, *asJSON)
	case "enroll":
		var cred string
		var bind map[string]string
		if labelsGiven {
			bind = labels
		}
		if cred, err = admin.Enroll(ctx, node, *replace, bind); err == nil {
			err = printCredential(stdout, stderr, node, cred, *out)
		}
	case "label":
		if err = admin.Label(ctx, node, labels); err == nil {
			fmt.Fprintf(stdout, "%s: labels bound: %s (tenant %q)\n", node, orNone(labels.String()), key.Of(labels))
		}
	case "reserve":
		if err = admin.Reserve(ctx, node, labels); err == nil {
			fmt.Fprintf(stdout, "%s reserved for %s (tenant %q): only a bootstrap token of that tenant, an operator or a certificate may enroll it\n", node, labels, key.Of(labels))
		}
	case "revoke":
		if err = admin.Revoke(ctx, node); err == nil {
			fmt.Fprintf(stdout, "%s revoked: it may not report until re-enrolled (nbs-collector nodes reenroll %s)\n", node, node)
		}
	case "reenroll":
		var ok bool
		if ok, err = admin.Reenroll(ctx, node); err == nil && !ok {
			err = fmt.Errorf("%s is neither enrolled nor revoked", node)
		}
		if err == nil {
			fmt.Fprintf(stdout, "%s may enroll again: its next Hello with a bootstrap token gets a new credential\n", node)
		}
	case "delete":
		if err = admin.Delete(ctx, node); err == nil {
			fmt.Fprintf(stdout, "%s deleted with its data\n", node)
		}
	case "bootstrap create":
		var token string
		var info nodeauth.BootstrapTokenInfo
		token, info, err = admin.CreateBootstrapToken(ctx, nodeauth.NewBootstrapToken{Name: *name, Labels: labels, TTL: ttl, MaxNodes: *maxNodes})
		if err == nil {
			fmt.Fprintln(stdout, token)
			fmt.Fprintf(stderr, "bootstrap token %s (shown once) enrolls new nodes into %s until %s: put it in each node's --node.bootstrap-token-file, mode 0600\n",
				info.Name, labels, info.ExpiresAt.UTC().Format(time.DateTime))
		}
	case "quota set":
		var quota int
		if quota, err = strconv.Atoi(rest[1]); err != nil {
			err = fmt.Errorf("node quota %q is not a whole number", rest[1])
		} else if err = admin.SetTenantQuota(ctx, node, quota); err == nil {
			fmt.Fprintf(stdout, "tenant %q may register at most %d nodes\n", node, quota)
		}
	case "quota remove":
		if err = admin.RemoveTenantQuota(ctx, node); err == nil {
			fmt.Fprintf(stdout, "tenant %q has --ingest.max-nodes-per-tenant again\n", node)
		} else if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("tenant %q has no node quota of its own", node)
		}
	case "quota list":
		var qs []store.TenantQuota
		if qs, err = admin.TenantQuotas(ctx); err == nil {
			if *asJSON {
				err = printList(stdout, "quotas", qs)
			} else {
				tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TENANT\tNODES\tQUOTA\tSET BY\tSET AT")
				for _, q := range qs {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", q.Tenant, q.Nodes, q.MaxNodes, q.SetBy, q.SetAt.UTC().Format(time.DateTime))
				}
				err = tw.Flush()
			}
		}
	case "bootstrap list":
		err = listBootstrapTokens(ctx, admin, stdout, *asJSON)
	case "bootstrap revoke":
		if err = admin.RevokeBootstrapToken(ctx, *name); err == nil {
			fmt.Fprintf(stdout, "bootstrap token %s revoked; the nodes it enrolled keep their credentials and labels\n", *name)
		}
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%s: no such node", node)
		}
		fmt.Fprintf(stderr, "nbs-collector nodes %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// printList writes {key: list} as indented JSON, an empty list as [].
func printList[T any](w io.Writer, key string, list []T) error {
	if list == nil {
		list = []T{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{key: list})
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func listBootstrapTokens(ctx context.Context, admin *nodeauth.Admin, w io.Writer, asJSON bool) error {
	ts, err := admin.ListBootstrapTokens(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printList(w, "bootstrap_tokens", ts)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tLABELS\tENROLLED\tEXPIRES\tSTATE")
	now := time.Now()
	for _, t := range ts {
		enrolled := fmt.Sprint(t.Enrolled)
		if t.MaxNodes != nil {
			enrolled += fmt.Sprintf("/%d", *t.MaxNodes)
		}
		state := "live"
		switch {
		case t.RevokedAt != nil:
			state = "revoked " + t.RevokedAt.UTC().Format(time.DateTime)
		case !t.ExpiresAt.After(now):
			state = "expired"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, access.Selector(t.Labels), enrolled, t.ExpiresAt.UTC().Format(time.DateTime), state)
	}
	return tw.Flush()
}

func printCredential(stdout, stderr io.Writer, node, cred, out string) error {
	if out == "" {
		fmt.Fprintln(stdout, cred)
		fmt.Fprintf(stderr, "node credential for %s (shown once): put it in the node's --node.credential-file, mode 0600\n", node)
		return nil
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write credential (the node is enrolled; run enroll --replace to issue another): %w", err)
	}
	if _, err := fmt.Fprintln(f, cred); err != nil {
		f.Close()
		return fmt.Errorf("write credential: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write credential: %w", err)
	}
	fmt.Fprintf(stderr, "node credential for %s written to %s: copy it to the node's --node.credential-file, mode 0600\n", node, out)
	return nil
}

func listNodes(ctx context.Context, admin *nodeauth.Admin, w io.Writer, asJSON bool) error {
	ids, err := admin.List(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printList(w, "nodes", ids)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tTENANT\tBOUND LABELS\tENROLLED\tLAST VERIFIED\tLAST PEER\tLAST HELLO\tCLAIMED")
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.DateTime)
	}
	for _, n := range ids {
		enrolled := "-"
		if n.EnrolledAt != nil {
			enrolled = ts(n.EnrolledAt) + " (" + n.EnrolledBy + ")"
		}
		state := n.State
		if n.State == "revoked" {
			state += " " + ts(n.RevokedAt)
		}
		peer := n.LastPeer
		if peer == "" {
			peer = "-"
		}
		hello := ts(n.LastHello)
		if !n.HasData {
			hello = "no data"
		}
		claimed := "-"
		if len(n.ClaimedLabels) > 0 {
			claimed = access.Selector(n.ClaimedLabels).String() + " (ignored)"
		}
		t := n.Tenant
		if t == "" {
			t = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, state, t, orNone(access.Selector(n.BoundLabels).String()), enrolled, ts(n.LastUsedAt), peer, hello, claimed)
	}
	return tw.Flush()
}
