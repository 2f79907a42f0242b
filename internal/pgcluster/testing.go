package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// shared is the one cluster of a test binary. It is the package's only
// global: Main sets it before running the tests and clears it after, and
// Database starts the cluster on first use, so a package whose selected
// tests need no database never pays for initdb.
var shared atomic.Pointer[testCluster]

// Main runs a test binary's tests with a shared throwaway cluster and
// exits. Use it as the whole TestMain:
//
//	func TestMain(m *testing.M) { pgcluster.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the os.Exit, for a TestMain that does more.
func Run(m *testing.M) int {
	tc := &testCluster{}
	shared.Store(tc)
	code := m.Run()
	shared.Store(nil)
	if err := tc.close(); err != nil {
		fmt.Fprintf(os.Stderr, "pgcluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Database creates a fresh, empty database on the test binary's shared
// cluster, drops it when the test ends and returns its URL.
//
// Without PostgreSQL binaries the test is skipped, unless NBS_REQUIRE_PG=1
// or CI=true, where it fails so CI cannot go green by skipping. Under
// go test -short (make check) it is skipped.
func Database(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		// make check: the unit tests only; make test and CI never pass -short.
		t.Skip("-short: needs PostgreSQL (make test runs it)")
	}
	tc := shared.Load()
	if tc == nil {
		t.Fatal("pgcluster.Database needs the package's TestMain to call pgcluster.Main(m)")
	}
	c, err := tc.get()
	if err != nil {
		if errors.Is(err, ErrNoPostgres) && !requirePG(os.Getenv) {
			t.Skipf("skipping: %v (set NBS_REQUIRE_PG=1 to fail instead)", err)
		}
		t.Fatalf("start test PostgreSQL cluster: %v", err)
	}
	name := testDBName(t.Name(), tc.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatalf("pgcluster.Database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Errorf("pgcluster.Database cleanup: %v", err)
		}
	})
	return url
}

// requirePG reports whether missing PostgreSQL must fail tests.
func requirePG(getenv func(string) string) bool {
	return getenv("NBS_REQUIRE_PG") == "1" || strings.EqualFold(getenv("CI"), "true")
}

// testDBName makes a database name from a test name: readable in
// pg_database while debugging, unique through the sequence number.
func testDBName(testName string, seq int64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	prefix := fmt.Sprintf("t%d_", seq)
	name := prefix + b.String()
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// testCluster is the lazily started cluster of one test binary, plus a
// watchdog process that removes it if the binary dies without cleaning
// up (test timeout panic, SIGKILL, Ctrl-C).
type testCluster struct {
	once     sync.Once
	dir      string
	cluster  *Cluster
	err      error
	seq      atomic.Int64
	watchdog *exec.Cmd
	wdStdin  io.WriteCloser
}

func (tc *testCluster) get() (*Cluster, error) {
	tc.once.Do(func() { tc.cluster, tc.err = tc.start() })
	return tc.cluster, tc.err
}

func (tc *testCluster) start() (*Cluster, error) {
	// Find binaries before making a directory, so a machine without
	// PostgreSQL leaves nothing behind.
	binDir, err := findBinDir("")
	if err != nil {
		return nil, err
	}
	run, err := newRunner(binDir)
	if err != nil {
		return nil, err
	}
	tc.dir, err = os.MkdirTemp("", "nbs-pg-")
	if err != nil {
		return nil, fmt.Errorf("create test cluster dir: %w", err)
	}
	// MkdirTemp makes 0700; the server user must be able to enter it.
	if err := os.Chmod(tc.dir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod test cluster dir %s: %w", tc.dir, err)
	}
	if err := tc.startWatchdog(run); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return Start(ctx, Options{Dir: tc.dir, BinDir: binDir})
}

// watchdogScript waits for a line on stdin. "done" means the test binary
// cleaned up itself; EOF means it died, so stop the server and remove dir.
const watchdogScript = `read -r line
[ "$line" = done ] && exit 0
"$@" stop -D "$NBS_PGDATA" -m immediate >/dev/null 2>&1
rm -rf -- "$NBS_PGDIR"
`

func (tc *testCluster) startWatchdog(run *runner) error {
	cmd := exec.Command("/bin/sh", append([]string{"-c", watchdogScript, "pgcluster-watchdog"}, run.argv("pg_ctl")...)...)
	cmd.Env = append(cleanEnv(), "NBS_PGDATA="+tc.dir+"/data", "NBS_PGDIR="+tc.dir)
	// Own process group: Ctrl-C on the terminal must kill the test binary
	// (closing the pipe) but not the watchdog that cleans up after it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("start cluster watchdog: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start cluster watchdog: %w", err)
	}
	tc.watchdog, tc.wdStdin = cmd, stdin
	return nil
}

// close stops the cluster, removes its directory and dismisses the
// watchdog. It is called once, after all tests have finished.
func (tc *testCluster) close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if tc.cluster != nil {
		if err := tc.cluster.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if tc.dir != "" {
		if err := os.RemoveAll(tc.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove test cluster dir: %w", err))
		}
	}
	if tc.watchdog != nil {
		_, err := io.WriteString(tc.wdStdin, "done\n")
		errs = append(errs, err, tc.wdStdin.Close(), tc.watchdog.Wait())
	}
	return errors.Join(errs...)
}

// ClusterDir is a directory for a test's own clusters (a primary and its
// standby, one to stop), which the postgres user the server binaries run
// as can reach. Like Database it skips (or fails under NBS_REQUIRE_PG)
// where there is no PostgreSQL.
func ClusterDir(t testing.TB) string {
	t.Helper()
	Database(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
