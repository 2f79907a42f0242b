package pgcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// clusterDir returns an empty directory the postgres user can reach
// (t.TempDir's parent is 0700) and stops any cluster in it at cleanup.
func clusterDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts PostgreSQL (make test runs it)")
	}
	if _, err := findBinDir(""); err != nil {
		if requirePG(os.Getenv) {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "nbs-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := StopDir(ctx, Options{Dir: dir}); err != nil {
			t.Errorf("stop cluster at cleanup: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove cluster dir: %v", err)
		}
	})
	return dir
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func postmasterPID(t *testing.T, c *Cluster) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitN(string(b), "\n", 2)[0]
}

func TestStartStop(t *testing.T) {
	ctx := testContext(t)
	dir := clusterDir(t)

	c, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port() == 0 || c.Dir() != dir {
		t.Errorf("Port() = %d, Dir() = %q; want non-zero port and %q", c.Port(), c.Dir(), dir)
	}
	wantURL := "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.Port()) + "/nbs?sslmode=disable"
	if c.URL() != wantURL {
		t.Errorf("URL() = %q, want %q", c.URL(), wantURL)
	}
	conn := connect(t, ctx, c.URL())
	var settings [4]string
	if err := conn.QueryRow(ctx, "SELECT current_database(), current_setting('listen_addresses'), current_setting('shared_buffers'), current_setting('jit')").
		Scan(&settings[0], &settings[1], &settings[2], &settings[3]); err != nil {
		t.Fatal(err)
	}
	if want := [4]string{"nbs", "127.0.0.1", "128MB", "off"}; settings != want {
		t.Errorf("database and settings = %v, want %v", settings, want)
	}
	conn.Close(ctx)
	if _, err := os.Stat(filepath.Join(dir, "sock", ".s.PGSQL."+strconv.Itoa(c.Port()))); err != nil {
		t.Errorf("unix socket in Dir/sock: %v", err)
	}

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, c.URL()); err == nil {
		t.Error("connect after Stop succeeded")
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if was, err := StopDir(ctx, Options{Dir: dir}); was || err != nil {
		t.Errorf("StopDir on stopped cluster = %v, %v; want false, nil", was, err)
	}
}

func TestStartReusesRunningCluster(t *testing.T) {
	ctx := testContext(t)
	dir := clusterDir(t)

	first, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, ctx, first.URL()).Exec(ctx, "CREATE TABLE marker (x int)"); err != nil {
		t.Fatal(err)
	}
	pid := postmasterPID(t, first)
	versionFile := filepath.Join(dir, "data", "PG_VERSION")
	before, err := os.Stat(versionFile)
	if err != nil {
		t.Fatal(err)
	}

	second, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if second.Port() != first.Port() {
		t.Errorf("second Start port = %d, want %d", second.Port(), first.Port())
	}
	if got := postmasterPID(t, second); got != pid {
		t.Errorf("postmaster pid changed from %s to %s: server was restarted", pid, got)
	}
	after, err := os.Stat(versionFile)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("PG_VERSION rewritten: initdb ran again")
	}

	// A different explicit port cannot be honoured by a running cluster.
	if _, err := Start(ctx, Options{Dir: dir, Port: first.Port() + 1}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("Start with another port on a running cluster: err = %v, want 'already running'", err)
	}

	// After a stop, Start restarts the existing cluster: data survives.
	if err := second.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	third, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	var n int
	if err := connect(t, ctx, third.URL()).QueryRow(ctx, "SELECT count(*) FROM marker").Scan(&n); err != nil {
		t.Errorf("table from before the restart: %v", err)
	}
	if was, err := StopDir(ctx, Options{Dir: dir}); !was || err != nil {
		t.Errorf("StopDir on running cluster = %v, %v; want true, nil", was, err)
	}
}

func TestCreateDatabase(t *testing.T) {
	ctx := testContext(t)
	c, err := Start(ctx, Options{Dir: clusterDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	urlA, err := c.CreateDatabase(ctx, "iso_a")
	if err != nil {
		t.Fatal(err)
	}
	urlB, err := c.CreateDatabase(ctx, "iso_b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, ctx, urlA).Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var inB bool
	if err := connect(t, ctx, urlB).QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&inB); err != nil {
		t.Fatal(err)
	}
	if inB {
		t.Error("table created in iso_a is visible in iso_b")
	}

	for _, tt := range []struct {
		name, db, wantErr string
	}{
		{"duplicate", "iso_a", "already exists"},
		{"upper case", "Iso", "name must match"},
		{"injection", `x"; DROP DATABASE nbs; --`, "name must match"},
		{"too long", strings.Repeat("a", 64), "name must match"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.CreateDatabase(ctx, tt.db)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CreateDatabase(%q) err = %v, want containing %q", tt.db, err, tt.wantErr)
			}
		})
	}

	if err := c.DropDatabase(ctx, "iso_a"); err != nil {
		t.Fatal(err)
	}
	if err := c.DropDatabase(ctx, "iso_a"); err != nil {
		t.Errorf("dropping a missing database: %v", err)
	}
}

func TestStartBrokenCluster(t *testing.T) {
	for _, tt := range []struct {
		name    string
		port    func(t *testing.T) int
		breakIt func(t *testing.T, dir string)
		wantLog string // expected in the quoted server log
	}{
		{
			name: "bad setting in postgresql.conf",
			breakIt: func(t *testing.T, dir string) {
				appendFile(t, filepath.Join(dir, "data", "postgresql.conf"), "\nno_such_setting = 1\n")
			},
			wantLog: "no_such_setting",
		},
		{
			name: "pg_control missing",
			breakIt: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "data", "global", "pg_control")); err != nil {
					t.Fatal(err)
				}
			},
			wantLog: "pg_control",
		},
		{
			name: "port taken",
			port: func(t *testing.T) int {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				return l.Addr().(*net.TCPAddr).Port
			},
			wantLog: "could not bind",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			dir := clusterDir(t)
			if tt.breakIt != nil {
				c, err := Start(ctx, Options{Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				tt.breakIt(t, dir)
			}
			opts := Options{Dir: dir}
			if tt.port != nil {
				opts.Port = tt.port(t)
			}
			_, err := Start(ctx, opts)
			if err == nil {
				t.Fatal("Start succeeded on a broken cluster")
			}
			msg := err.Error()
			logPath := filepath.Join(dir, "postgres.log")
			if !strings.Contains(msg, "server log "+logPath) || !strings.Contains(msg, tt.wantLog) {
				t.Errorf("error does not name the log %s and quote %q from it:\n%s", logPath, tt.wantLog, msg)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	ctx := testContext(t)
	for _, tt := range []struct {
		name    string
		opts    Options
		wantErr string
		wantIs  error
	}{
		{"no dir", Options{}, "Dir is empty", nil},
		{"bad port", Options{Dir: t.TempDir(), Port: 70000}, "out of range", nil},
		{"no binaries", Options{Dir: t.TempDir(), BinDir: t.TempDir()}, "no initdb", ErrNoPostgres},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Start(ctx, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.wantIs)
			}
		})
	}
}

func TestStartUntraversableParent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the server as another user")
	}
	clusterDir(t) // skips without binaries
	// t.TempDir's parent is 0700 and owned by root.
	_, err := Start(testContext(t), Options{Dir: filepath.Join(t.TempDir(), "pg")})
	if err == nil || !strings.Contains(err.Error(), "not traversable by user postgres") {
		t.Errorf("err = %v, want 'not traversable by user postgres'", err)
	}
}

func TestDatabase(t *testing.T) {
	urls := map[string]bool{}
	var names []string
	for _, sub := range []string{"first", "second"} {
		t.Run(sub, func(t *testing.T) {
			// Registered before Database, so it runs after the drop: the
			// drop must succeed with this session still open.
			var open *pgx.Conn
			t.Cleanup(func() {
				if open != nil {
					open.Close(context.Background())
				}
			})
			url := Database(t)
			if urls[url] {
				t.Errorf("Database returned %s twice", url)
			}
			urls[url] = true
			var err error
			if open, err = pgx.Connect(t.Context(), url); err != nil {
				t.Fatal(err)
			}
			var name string
			if err := open.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		})
	}
	if t.Failed() || len(names) != 2 {
		return
	}
	ctx := testContext(t)
	conn := connect(t, ctx, shared.Load().cluster.AdminURL())
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", names).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of the databases %v still exist after their tests", left, names)
	}
}

func TestRequirePG(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"NBS_REQUIRE_PG": "1"}, true},
		{map[string]string{"NBS_REQUIRE_PG": "0"}, false},
		{map[string]string{"CI": "true"}, true},
		{map[string]string{"CI": "TRUE"}, true},
		{map[string]string{"CI": "false"}, false},
	} {
		if got := requirePG(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("requirePG(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

func TestTestDBName(t *testing.T) {
	for _, tt := range []struct {
		test string
		seq  int64
		want string
	}{
		{"TestFoo", 1, "t1_testfoo"},
		{"TestFoo/sub case#01", 12, "t12_testfoo_sub_case_01"},
		{strings.Repeat("X", 100), 3, "t3_" + strings.Repeat("x", 60)},
	} {
		got := testDBName(tt.test, tt.seq)
		if got != tt.want || !identRE.MatchString(got) {
			t.Errorf("testDBName(%q, %d) = %q, want %q (and a valid name)", tt.test, tt.seq, got, tt.want)
		}
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
