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
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/store"
)

const nodesUsage = `usage: nbs-collector nodes COMMAND [flags] [NODE]

Commands on node identities, run against the database (a running collector
ends the affected node's stream at once):

  list              every node name: enrolled, revoked or not enrolled, with
                    when and from where it last proved its identity
  enroll NODE       bind NODE to a new node credential and print it once, for a
                    node without the bootstrap token or to rotate a credential
                    (--replace for an enrolled node; --out FILE writes it 0600)
  revoke NODE       end NODE's stream; nothing may report under the name (no
                    credential, certificate or bootstrap token) until re-enrolled
  reenroll NODE     forget NODE's credential or revocation: the next Hello with
                    the bootstrap token enrolls it with a new credential
  delete NODE       delete NODE's data and credential (a revocation stays)

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
	asJSON := fs.Bool("json", false, "list: print JSON")
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	cmd := args[0]
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
	needNode := cmd != "list"
	switch {
	case cmd != "list" && cmd != "enroll" && cmd != "revoke" && cmd != "reenroll" && cmd != "delete":
		fmt.Fprintf(stderr, "nbs-collector nodes: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	case needNode && len(rest) != 1, !needNode && len(rest) != 0:
		fmt.Fprintf(stderr, "nbs-collector nodes %s: want %s\n", cmd, map[bool]string{true: "one node name", false: "no arguments"}[needNode])
		return 2
	case *dbURL == "":
		fmt.Fprintln(stderr, "nbs-collector nodes: --db.url (or env NBS_DB_URL) is required")
		return 2
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
	admin := nodeauth.NewAdmin(st, nil, "", log)

	var node string
	if needNode {
		node = rest[0]
	}
	switch cmd {
	case "list":
		err = listNodes(ctx, admin, stdout, *asJSON)
	case "enroll":
		var cred string
		if cred, err = admin.Enroll(ctx, node, *replace); err == nil {
			err = printCredential(stdout, stderr, node, cred, *out)
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
			fmt.Fprintf(stdout, "%s may enroll again: its next Hello with the bootstrap token gets a new credential\n", node)
		}
	case "delete":
		if err = admin.Delete(ctx, node); err == nil {
			fmt.Fprintf(stdout, "%s deleted with its data\n", node)
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
		if ids == nil {
			ids = []nodeauth.NodeIdentity{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"nodes": ids})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tENROLLED\tLAST VERIFIED\tLAST PEER\tLAST HELLO")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, state, enrolled, ts(n.LastUsedAt), peer, hello)
	}
	return tw.Flush()
}
