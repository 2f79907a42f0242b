package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/collector/access"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// Each test builds its own lab (namespaces with random names), database,
// collector on a free port and agents, so a test calls t.Parallel unless
// it times something (then it is listed in tools/timing-tests.txt and make
// test runs it alone, before the rest) or it checks the whole process
// (the soak test). The timing tests do not call t.Parallel: in a plain
// go test ./e2e they run one by one, before the parallel ones.
func TestMain(m *testing.M) { pgcluster.Main(m) }

// testLogger logs a part of the system into the test's log. A benchmark's
// log is cut to its first lines, so there the parts log to stderr instead,
// keeping the benchmark's log for its results.
func testLogger(t testing.TB, part string) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("NBS_TEST_VERBOSE") != "" {
		level = slog.LevelDebug
	}
	var w io.Writer = testWriter{t}
	if _, bench := t.(*testing.B); bench {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("part", part)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// collector runs an in-process collector until stopped.
type collector struct {
	grpcAddr, httpAddr string
	// token is an admin API token the harness made for the tests' calls,
	// as an operator would: with nbs-collector token create.
	token string
	stop  func()
}

// startCollector runs the production configuration on its own database,
// listening on loopback, with what the test changes in set.
func startCollector(t testing.TB, dbURL, grpcAddr string, set ...func(*collectorapp.Config)) *collector {
	t.Helper()
	cfg := collectorapp.DefaultConfig()
	cfg.DBURL, cfg.GRPCAddr, cfg.HTTPAddr = dbURL, grpcAddr, "127.0.0.1:0"
	for _, f := range set {
		f(&cfg)
	}
	token := adminToken(t, cfg.DBURL)
	ctx, cancel := context.WithCancel(context.Background())
	c := collectorapp.New(cfg, testLogger(t, "collector"))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("collector did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("collector not ready within 30s")
	}
	g, h := c.Addrs()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector: %v", err)
		}
	}
	t.Cleanup(stop)
	return &collector{grpcAddr: g, httpAddr: h, token: token, stop: stop}
}

// adminToken makes an admin token in the database with `nbs-collector
// token create` (which applies the schema first, as it does before any
// collector ran). Every collector gets its own, so collectors sharing a
// database never revoke each other's.
func adminToken(t testing.TB, dbURL string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := access.TokenCommand{
		Open: func(ctx context.Context, url string) (*pgxpool.Pool, func(), error) {
			st, err := store.Open(ctx, url, testLogger(t, "token"))
			if err != nil {
				return nil, nil, err
			}
			return st.Pool(), st.Close, nil
		},
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }, Log: testLogger(t, "token"),
	}
	name := fmt.Sprintf("e2e-admin-%d", time.Now().UnixNano())
	if code := cmd.Run(context.Background(), []string{"create", "--db.url", dbURL, "--name", name, "--role", "admin", "--expires", "1d"}); code != 0 {
		t.Fatalf("nbs-collector token create: exit %d: %s", code, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// call sends a request to the collector's HTTP side with the harness's
// admin token and returns the status and body.
func (c *collector) call(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	return c.callAs(t, c.token, method, path, body)
}

// callAs is call with another bearer token (a customer's, say).
func (c *collector) callAs(t testing.TB, token, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.httpAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return resp.StatusCode, b
}

type agent struct {
	*agentapp.Agent
	stop func()
}

// startAgent runs an agent named name in a lab namespace ("": this
// process's) with the production configuration but for what tests need to
// run in seconds: a one-second interval, no periodic snapshot during a test,
// and evidence enough for bursts of hundreds of events. set changes what a
// test needs besides.
func startAgent(t testing.TB, name, netns, collectorAddr string, set ...func(*agentapp.Config)) *agent {
	t.Helper()
	cfg := agentapp.DefaultConfig()
	cfg.NodeName, cfg.Netns, cfg.CollectorAddress = name, netns, collectorAddr
	cfg.Interval, cfg.SnapshotEvery, cfg.EvidencePerSecond = time.Second, time.Hour, 1000
	// Each agent keeps its node credential and its report spool to itself,
	// never in the machine's /var/lib/nbs.
	dir := t.TempDir()
	cfg.CredentialFile = filepath.Join(dir, "node-credential")
	cfg.SpoolDir = filepath.Join(dir, "spool")
	// Nothing pinned in the machine's bpffs, where it would outlive the
	// test; a test of restarts pins in a bpffs of its own.
	cfg.PinDir = "none"
	for _, f := range set {
		f(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := agentapp.New(cfg, testLogger(t, "agent:"+cfg.NodeName))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", cfg.NodeName, err)
		}
	}
	t.Cleanup(stop)
	return &agent{Agent: a, stop: stop}
}

// getJSON GETs path (e.g. /api/v1/nodes) from the collector and decodes
// a 200 answer into out.
func (c *collector) getJSON(t testing.TB, path string, out any) int {
	t.Helper()
	code, body := c.call(t, http.MethodGet, path, "")
	if out != nil && code == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("GET %s: decode %q: %v", path, body, err)
		}
	}
	return code
}

// eventually polls cond until it returns "" and says how long that took,
// or fails the test when the timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() string) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		if last = cond(); last == "" {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after %s: %s", timeout, last)
	return 0
}

type treeNode struct {
	ID       string      `json:"id"`
	Title    string      `json:"title"`
	Unit     string      `json:"unit"`
	Value    *float64    `json:"value"`
	Count    *float64    `json:"count"`
	State    string      `json:"state"`
	Recent   *float64    `json:"recent_count"`
	RecentSt string      `json:"recent_state"`
	Children []*treeNode `json:"children"`
}

type treeResp struct {
	Node  string      `json:"node"`
	Roots []*treeNode `json:"roots"`
}

func (tr treeResp) find(id string) *treeNode {
	var walk func([]*treeNode) *treeNode
	walk = func(ns []*treeNode) *treeNode {
		for _, n := range ns {
			if n.ID == id {
				return n
			}
			if f := walk(n.Children); f != nil {
				return f
			}
		}
		return nil
	}
	return walk(tr.Roots)
}

type seriesResp struct {
	Points []struct {
		T     time.Time `json:"t"`
		Value *float64  `json:"value"`
		Count *float64  `json:"count"`
		State string    `json:"state"`
	} `json:"points"`
}

// storedTotal sums a rate metric's increases over everything stored.
func storedTotal(t testing.TB, c *collector, node, metric string) float64 {
	t.Helper()
	var s seriesResp
	url := fmt.Sprintf("/api/v1/nodes/%s/series?metric=%s&from=%d", node, metric, time.Now().Add(-time.Hour).UnixMilli())
	if code := c.getJSON(t, url, &s); code != http.StatusOK {
		return -1
	}
	var sum float64
	for _, p := range s.Points {
		if p.Count != nil {
			sum += *p.Count
		}
	}
	return sum
}
