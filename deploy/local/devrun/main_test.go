package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

// The test binary doubles as the stand-in collector and agent: the
// scripts written by standIns re-exec it with NBS_DEVRUN_STANDIN set.
func TestMain(m *testing.M) {
	if role := os.Getenv("NBS_DEVRUN_STANDIN"); role != "" {
		os.Exit(standIn(role, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// standIn behaves like the real binaries as far as devrun can tell:
// prints, serves /readyz (collector), records its arguments and exits on
// SIGTERM. NBS_STANDIN_MODE varies that: "crash" exits 3 soon,
// "stubborn" ignores SIGTERM, "unready" answers /readyz with 503,
// "notoken" writes no admin token.
func standIn(role string, args []string) int {
	mode := os.Getenv("NBS_STANDIN_MODE_" + strings.ToUpper(role))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
	if dir := os.Getenv("NBS_STANDIN_RECORD"); dir != "" {
		b, _ := json.Marshal(args)
		os.WriteFile(filepath.Join(dir, role+".json"), b, 0o644)
	}
	fmt.Printf("%s starting\n", role)
	fmt.Fprint(os.Stderr, "a line without newline to stderr")
	if role == "collector" {
		fs := flag.NewFlagSet(role, flag.ContinueOnError)
		addr := fs.String("http.listen-address", "", "")
		fs.String("grpc.listen-address", "", "")
		fs.String("db.url", "", "")
		tokenFile := fs.String("auth.bootstrap-admin-file", "", "")
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if mode != "notoken" {
			os.WriteFile(*tokenFile, []byte("nbs_standintoken\n"), 0o600)
		}
		l, err := net.Listen("tcp", *addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if mode == "unready" {
				http.Error(w, "database not migrated", http.StatusServiceUnavailable)
			}
		}))
	}
	if mode == "crash" {
		time.Sleep(300 * time.Millisecond)
		fmt.Println("crashing")
		return 3
	}
	<-sigs
	fmt.Printf("%s got SIGTERM\n", role)
	return 0
}

// standIns writes nbs-collector and nbs-agent scripts that run standIn.
func standIns(t *testing.T) (binDir, recordDir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	binDir, recordDir = t.TempDir(), t.TempDir()
	for _, role := range []string{"collector", "agent"} {
		script := fmt.Sprintf("#!/bin/sh\nNBS_DEVRUN_STANDIN=%s exec %q \"$@\"\n", role, self)
		if err := os.WriteFile(filepath.Join(binDir, "nbs-"+role), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("NBS_STANDIN_RECORD", recordDir)
	return binDir, recordDir
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is written by devrun's console and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func readArgs(t *testing.T, dir, role string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, role+".json"))
	if err != nil {
		t.Fatalf("%s arguments not recorded: %v", role, err)
	}
	var args []string
	if err := json.Unmarshal(b, &args); err != nil {
		t.Fatal(err)
	}
	return args
}

// pgDir returns a cluster directory the postgres user can traverse.
func pgDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbs-devrun-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pgcluster.StopDir(context.Background(), pgcluster.Options{Dir: filepath.Join(dir, "pg")})
		os.RemoveAll(dir)
	})
	return filepath.Join(dir, "pg")
}

func TestRun(t *testing.T) {
	for _, tt := range []struct {
		name      string
		modes     map[string]string // role -> NBS_STANDIN_MODE
		ownPG     bool              // start a cluster instead of NBS_DB_URL
		extraArgs []string
		ctrlC     bool     // cancel once the banner is out
		wantErr   string   // "" = run returns nil
		wantOut   []string // substrings of stdout+stderr
	}{
		{
			name:      "ctrl-c stops children",
			extraArgs: []string{"--agent.args", `--labels 'customer=acme corp'`},
			ctrlC:     true,
			wantOut: []string{
				"[collector] collector starting", "[agent] agent starting",
				"[collector] a line without newline to stderr",
				"[agent] agent got SIGTERM", "[collector] collector got SIGTERM",
				"NBS is running", "/api/v1/nodes", "NO_SOCKET", "Ctrl-C stops everything",
				"/login#token=nbs_standintoken", `curl -H "Authorization: Bearer $NBS_TOKEN" http://`, "export NBS_TOKEN=$(cat .run/admin-token)",
				"user:xxxxx@db.example", // NBS_DB_URL printed with the password redacted
			},
		},
		{
			name:    "agent crash stops collector",
			modes:   map[string]string{"agent": "crash"},
			wantErr: "agent exited unexpectedly (exit status 3); its output is in",
			wantOut: []string{"[agent] crashing", "[collector] collector got SIGTERM"},
		},
		{
			name:    "collector writes no admin token",
			modes:   map[string]string{"collector": "notoken"},
			wantErr: "wrote no admin token",
			wantOut: []string{"[collector] collector got SIGTERM"},
		},
		{
			name:    "collector crash before ready",
			modes:   map[string]string{"collector": "crash"},
			wantErr: "collector exited unexpectedly (exit status 3)",
		},
		{
			name:      "collector never ready",
			modes:     map[string]string{"collector": "unready"},
			extraArgs: []string{"--ready-timeout", "1s"},
			wantErr:   "collector not ready",
			wantOut:   []string{"[collector] collector got SIGTERM"},
		},
		{
			name:      "stubborn agent gets SIGKILL",
			modes:     map[string]string{"agent": "stubborn"},
			extraArgs: []string{"--stop-timeout", "500ms"},
			ctrlC:     true,
			wantOut:   []string{"sending SIGKILL", "child=agent", "[collector] collector got SIGTERM"},
		},
		{
			name:      "own cluster stopped with --pg.stop",
			ownPG:     true,
			extraArgs: []string{"--pg.stop"},
			ctrlC:     true,
			wantOut:   []string{"started PostgreSQL cluster", "stopped PostgreSQL cluster", "postgres://postgres@127.0.0.1:"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			binDir, recordDir := standIns(t)
			for _, role := range []string{"collector", "agent"} {
				t.Setenv("NBS_STANDIN_MODE_"+strings.ToUpper(role), tt.modes[role])
			}
			grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
			// A token file from an earlier run must not pass for this one's.
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, ".run"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, ".run", "admin-token"), []byte("nbs_stale\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{
				"--root", root, "--bin", binDir,
				"--collector.grpc-address", grpcAddr, "--collector.http-address", httpAddr,
				"--agent.interval", "3s",
			}, tt.extraArgs...)
			env := map[string]string{"NBS_DB_URL": "postgres://user:secret@db.example:5432/nbs"}
			if tt.ownPG {
				if _, err := os.Stat("/usr/lib/postgresql/15/bin/initdb"); err != nil && os.Getenv("NBS_PG_BINDIR") == "" {
					t.Skip("no PostgreSQL 15 binaries")
				}
				env = nil
				args = append(args, "--pg.dir", pgDir(t), "--pg.port", "0")
			}

			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var stdout, stderr syncBuffer
			if tt.ctrlC {
				// Wait for the agent's first line too: by then it has
				// recorded its arguments and set up its signal handling.
				ready := func() bool {
					out := stdout.String()
					return strings.Contains(out, "NBS is running") && strings.Contains(out, "[agent] agent starting")
				}
				go func() {
					for ctx.Err() == nil && !ready() {
						time.Sleep(20 * time.Millisecond)
					}
					cancel()
				}()
			}
			err := run(ctx, args, &stdout, &stderr, func(k string) string { return env[k] })
			out := stdout.String() + stderr.String()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("run: %v\noutput:\n%s", err, out)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("run err = %v, want containing %q\noutput:\n%s", err, tt.wantErr, out)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if !tt.ctrlC || tt.name != "ctrl-c stops children" {
				return
			}
			coll := readArgs(t, recordDir, "collector")
			wantColl := []string{"--db.url", env["NBS_DB_URL"], "--grpc.listen-address", grpcAddr, "--http.listen-address", httpAddr,
				"--auth.bootstrap-admin-file", filepath.Join(root, ".run", "admin-token")}
			if !slices.Equal(coll, wantColl) {
				t.Errorf("collector args = %q, want %q", coll, wantColl)
			}
			agent := readArgs(t, recordDir, "agent")
			wantAgent := []string{"--collector.address", grpcAddr, "--interval", "3s", "--spool.dir", filepath.Join(root, ".run", "spool"),
				"--bpf.pin-dir", "none", "--labels", "customer=acme corp"}
			if !slices.Equal(agent, wantAgent) {
				t.Errorf("agent args = %q, want %q", agent, wantAgent)
			}
		})
	}
}

func TestRunChecks(t *testing.T) {
	binDir, _ := standIns(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"missing binaries", []string{"--bin", t.TempDir()}, "nbs-collector missing (run `make build` first)"},
		{"port busy", []string{"--bin", binDir, "--collector.http-address", busy.Addr().String()}, "is not free"},
		{"bad agent args", []string{"--agent.args", `--labels "x`}, "--agent.args: unterminated"},
		{"positional", []string{"extra"}, "unexpected arguments"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--root", t.TempDir(), "--collector.grpc-address", freeAddr(t)}, tt.args...)
			var out syncBuffer
			err := run(t.Context(), args, &out, &out, func(string) string { return "postgres://x@y/z" })
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestStopDBNotRunning(t *testing.T) {
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/pg_ctl"); err != nil && os.Getenv("NBS_PG_BINDIR") == "" {
		t.Skip("no PostgreSQL 15 binaries")
	}
	var out syncBuffer
	if err := run(t.Context(), []string{"--root", t.TempDir(), "--stop-db"}, &out, &out, os.Getenv); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no PostgreSQL running in") {
		t.Errorf("output = %q", out.String())
	}
}

func TestSplitWords(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{"--labels customer=acme", []string{"--labels", "customer=acme"}, ""},
		{"--labels 'customer=acme corp'  --netns\tx", []string{"--labels", "customer=acme corp", "--netns", "x"}, ""},
		{`--labels "a=\"b\" c"`, []string{"--labels", `a="b" c`}, ""},
		{`"a\nb"`, []string{`a\nb`}, ""},
		{`a\ b 'it''s'`, []string{"a b", "its"}, ""},
		{`''`, []string{""}, ""},
		{`'unterminated`, nil, "unterminated ' quote"},
		{`trailing\`, nil, "trailing backslash"},
	} {
		got, err := splitWords(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("splitWords(%q) err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestLineWriter(t *testing.T) {
	var term, file bytes.Buffer
	con := newConsole(&term, &term)
	w := con.writer(&term, "[x] ", &file)
	for _, chunk := range []string{"par", "tial\nwhole\n", "", "two\nlines\nrest"} {
		w.Write([]byte(chunk))
	}
	w.Flush()
	if want := "[x] partial\n[x] whole\n[x] two\n[x] lines\n[x] rest\n"; term.String() != want {
		t.Errorf("terminal = %q, want %q", term.String(), want)
	}
	if want := "partial\nwhole\ntwo\nlines\nrest\n"; file.String() != want {
		t.Errorf("file = %q, want %q", file.String(), want)
	}
}

func TestDialAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7700": "127.0.0.1:7700",
		":7700":          "127.0.0.1:7700",
		"0.0.0.0:7700":   "127.0.0.1:7700",
		"[::]:7700":      "127.0.0.1:7700",
		"[::1]:7700":     "[::1]:7700",
		"localhost:7700": "localhost:7700",
	} {
		if got := dialAddr(in); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBox(t *testing.T) {
	got := box([]string{"ab", "ünï"})
	want := "┌─────┐\n│ ab  │\n│ ünï │\n└─────┘\n"
	if got != want {
		t.Errorf("box =\n%s\nwant\n%s", got, want)
	}
}
