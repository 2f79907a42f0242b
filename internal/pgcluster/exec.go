package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoPostgres is wrapped by errors caused by missing server binaries, so
// callers (Database in tests) can tell "not installed" from "broken".
var ErrNoPostgres = errors.New("PostgreSQL server binaries not found")

// serverUser runs the server binaries when this process is root.
const serverUser = "postgres"

// findBinDir picks the first directory that holds initdb, pg_ctl and
// postgres, preferring PostgreSQL 15, which the project targets.
func findBinDir(explicit string) (string, error) {
	var candidates []string
	switch {
	case explicit != "":
		candidates = []string{explicit}
	case os.Getenv("NBS_PG_BINDIR") != "":
		candidates = []string{os.Getenv("NBS_PG_BINDIR")}
	default:
		candidates = append(candidates, "/usr/lib/postgresql/15/bin")
		others, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Sort(sort.Reverse(sort.StringSlice(others)))
		candidates = append(candidates, others...)
		if p, err := exec.LookPath("pg_ctl"); err == nil {
			candidates = append(candidates, filepath.Dir(p))
		}
	}
	for _, dir := range candidates {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no initdb, pg_ctl and postgres in %s (install postgresql-15 or set NBS_PG_BINDIR)",
		ErrNoPostgres, strings.Join(candidates, ", "))
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// runner runs server binaries, as the postgres user when we are root.
type runner struct {
	binDir  string
	runuser string // path of runuser; empty when running as ourselves
	uid     int
	gid     int          // primary group, for chown
	gids    map[int]bool // all groups, for the traverse check
}

func newRunner(binDir string) (*runner, error) {
	r := &runner{binDir: binDir, uid: os.Geteuid(), gid: os.Getegid(), gids: map[int]bool{os.Getegid(): true}}
	if r.uid != 0 {
		return r, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, fmt.Errorf("look up user %s to run PostgreSQL as (it refuses to run as root): %w", serverUser, err)
	}
	if r.runuser, err = exec.LookPath("runuser"); err != nil {
		return nil, fmt.Errorf("find runuser to run PostgreSQL as %s: %w", serverUser, err)
	}
	if r.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("parse uid of %s: %w", serverUser, err)
	}
	if r.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("parse gid of %s: %w", serverUser, err)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("look up groups of %s: %w", serverUser, err)
	}
	r.gids = map[int]bool{}
	for _, g := range append(gids, u.Gid) {
		if n, err := strconv.Atoi(g); err == nil {
			r.gids[n] = true
		}
	}
	return r, nil
}

// argv is the command line that runs a server binary, for exec and for
// the test watchdog script.
func (r *runner) argv(name string, args ...string) []string {
	bin := filepath.Join(r.binDir, name)
	if r.runuser == "" {
		return append([]string{bin}, args...)
	}
	return append([]string{r.runuser, "-u", serverUser, "--", bin}, args...)
}

// output runs a server binary in dir and returns its combined output.
// PG* variables are removed so the caller's environment cannot redirect
// pg_ctl to another cluster.
func (r *runner) output(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	argv := r.argv(name, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	return cmd.CombinedOutput()
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// own hands path to the server user (a no-op when not root).
func (r *runner) own(path string) error {
	if r.runuser == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) == r.uid {
			return nil
		}
	}
	if err := os.Chown(path, r.uid, r.gid); err != nil {
		return fmt.Errorf("chown %s to %s: %w", path, serverUser, err)
	}
	return nil
}

// checkTraversable fails when the server user cannot reach dir, which
// otherwise surfaces as a confusing "permission denied" from initdb.
// Typical cause: a cluster under /root or under a 0700 t.TempDir().
func (r *runner) checkTraversable(dir string) error {
	if r.runuser == "" {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("check access of %s to %s: %w", serverUser, d, err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		mode := st.Mode().Perm()
		ok = mode&0o001 != 0 ||
			(int(sys.Uid) == r.uid && mode&0o100 != 0) ||
			(r.gids[int(sys.Gid)] && mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("directory %s (mode %v) is not traversable by user %s, which runs PostgreSQL; put the cluster elsewhere or chmod o+x %s",
				d, mode, serverUser, d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
