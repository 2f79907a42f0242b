// Package e2e drives the operator UI in a real headless Chromium against a
// real collector (in-process, on a throwaway PostgreSQL) fed by a real agent
// that watches real TCP resets in a network-namespace lab.
//
// It needs the UI built into the collector (cd web && npm ci && npm run
// build, before `go test`), Node.js, and Debian's chromium. Without them it
// skips, or fails when CI=true.
//
//	go test ./web/e2e -run TestBrowser -v
//	NBS_UPDATE_SCREENSHOTS=1 go test ./web/e2e   # also refreshes docs/screenshots/{tree,alerts,alert,alerts-phone,fleet,report}.png
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/alert/notify/webhook"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

const chromium = "/usr/bin/chromium"

// skipOrFail skips for a missing prerequisite, but fails in CI, where
// .ci/run installs and builds everything this test needs.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: the browser test must run)", msg)
	}
	t.Skip(msg)
}

// browserSetup finds what a Chromium test needs (web/, node, Playwright,
// Chromium, the built UI the collector embeds), skipping or, under CI,
// failing when one is missing, and makes the screenshots' directory.
func browserSetup(t *testing.T) (webDir, nodeBin, artifacts string) {
	t.Helper()
	webDir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	nodeBin, err = exec.LookPath("node")
	if err != nil {
		skipOrFail(t, "node (Node.js) is not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", "playwright-core")); err != nil {
		skipOrFail(t, "web/node_modules is missing: run `cd web && npm ci` (%v)", err)
	}
	if _, err := os.Stat(chromium); err != nil {
		skipOrFail(t, "%s is missing: apt-get install chromium (%v)", chromium, err)
	}
	if _, err := os.Stat(filepath.Join(webDir, "dist", "index.html")); err != nil {
		skipOrFail(t, "the UI is not built: run `cd web && npm run build` before go test, so the collector embeds it (%v)", err)
	}
	artifacts = os.Getenv("NBS_ARTIFACTS")
	if artifacts != "" {
		artifacts = filepath.Join(artifacts, "web-e2e")
	} else {
		artifacts = filepath.Join(webDir, "e2e", "artifacts")
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return webDir, nodeBin, artifacts
}

func TestBrowser(t *testing.T) {
	webDir, nodeBin, artifacts := browserSetup(t)

	lab := netlab.New(t)
	// Alerts go to a signed webhook, so the alert page's delivery log has
	// real deliveries to show.
	hook := startWebhook(t)
	dbURL := pgcluster.Database(t)
	httpAddr, grpcAddr, adminToken := startCollector(t, dbURL, hook.config(t), withDeadReceiver(t))
	// lab-b's customer pings its gateway (lab A's address: the mesh does not
	// cross customers), so its report has a ping target to chart.
	startAgent(t, "lab-b", lab.B, grpcAddr, agentapp.Labels{"customer": "acme", "rack": "r1"}, "gateway="+lab.IPA.String())
	startAgent(t, "lab-a", lab.A, grpcAddr, agentapp.Labels{"customer": "globex", "rack": "r2"}, "")
	nbs := site{base: "http://" + httpAddr, token: adminToken}
	base := nbs.base
	// A token of each role browser.mjs signs in with, made by the admin
	// through the API; the customer's selector matches lab-b only.
	operatorToken := nbs.createToken(t, `{"name":"browser-operator","role":"operator"}`)
	customerToken := nbs.createToken(t, `{"name":"browser-acme","role":"customer","selector":{"customer":"acme"}}`)

	// The collector must serve the built UI, not the "not built" page: the
	// test binary embeds web/dist as it was when it was compiled.
	if body := nbs.get(t, "/"); !strings.Contains(body, `id="app"`) {
		skipOrFail(t, "the collector in this test binary embeds no UI (web/dist was built after compiling?): %.200s", body)
	}
	waitReported(t, nbs, "lab-a", "lab-b")
	// A minute of the nodes' reports, all quiet, before the storm: the page
	// asked for a time in it (?at=) shows the tree as it was then. Trees of
	// the past are read from minute rollups, so the storm waits for the
	// next minute.
	quietMinute := time.Now().Truncate(time.Minute).Add(time.Minute)
	time.Sleep(time.Until(quietMinute.Add(time.Second)))
	pastAt := quietMinute.Add(-2 * time.Second).UTC().Format(time.RFC3339)

	// Resets keep coming for the whole browser run: 15 to 40 NO_SOCKET resets
	// a second sent by B, always over the 10/s crit level of
	// tcp_reset/sent/no_socket.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		resetLoop(ctx, t, lab)
	}()
	t.Cleanup(func() { stop(); wg.Wait() })
	waitTreeState(t, nbs, "lab-b", "tcp_reset/sent/no_socket", "crit")
	// The storm keeps the tcp_reset root CRIT for the whole run, far past the
	// two intervals of the default rule NBSRootCritical, which fires.
	waitAlert(t, nbs, "lab-b", "NBSRootCritical", "firing")
	// The operator's fleet is a large one: simulated nodes beside the lab's,
	// added once the lab's are up (waitReported reads every node).
	fleetNodes := fleetSize(t)
	seedFleet(t, dbURL, fleetNodes)
	updatePicture := os.Getenv("NBS_UPDATE_SCREENSHOTS") == "1"
	if updatePicture {
		// A minute and a half of history, so the README picture has trends to show.
		time.Sleep(90 * time.Second)
	}

	cmdCtx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cmdCtx, nodeBin, filepath.Join(webDir, "e2e", "browser.mjs"))
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(),
		"NBS_URL="+base,
		"NBS_TOKEN="+adminToken,
		"NBS_OPERATOR_TOKEN="+operatorToken,
		"NBS_CUSTOMER_TOKEN="+customerToken,
		"NBS_CUSTOMER_NODES=lab-b",        // customer=acme
		"NBS_CUSTOMER_HIDDEN_NODES=lab-a", // customer=globex
		"NBS_NODE=lab-b",
		"NBS_NODE_TENANT=acme",
		"NBS_OTHER_NODE=lab-a",
		fmt.Sprintf("NBS_FLEET_NODES=%d", fleetNodes),
		"NBS_METRIC=tcp_reset/sent/no_socket",
		"NBS_PAST_AT="+pastAt,
		"NBS_EVIDENCE_SRC="+netip.AddrPortFrom(lab.IPB, lab.ClosedPort).String(),
		"NBS_ALERT_RULE=NBSRootCritical",
		"NBS_ALERT_ROOT=tcp_reset",
		"NBS_ALERT_RECEIVER=webhook",
		// lab-b's tcp_reset root is CRIT throughout: an incident in acme's day.
		"NBS_REPORT_INCIDENT_NODE=lab-b",
		"NBS_ARTIFACTS="+artifacts,
		"NBS_CHROMIUM="+chromium,
		"NBS_EXPORT_FAILING_RECEIVER="+deadReceiver,
	)
	out := &lineLogger{t: t}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		t.Fatalf("browser run failed: %v (screenshots in %s)", err, artifacts)
	}
	t.Logf("screenshots in %s", artifacts)

	if n := hook.count(); n == 0 {
		t.Errorf("the webhook received no signed alert notification")
	} else {
		t.Logf("the webhook received %d signed alert notifications", n)
	}

	if updatePicture {
		// The run's screenshot -> the picture in docs/screenshots the README
		// and docs/*.md show (report.png is copied by browser.mjs itself).
		pictures := []struct{ shot, doc string }{
			{"tree.png", "tree.png"},
			{"alerts.png", "alerts.png"},
			{"alert-detail.png", "alert.png"},
			{"alerts-phone.png", "alerts-phone.png"},
			{"fleet.png", "fleet.png"},
		}
		for _, p := range pictures {
			dst := filepath.Join(webDir, "..", "docs", "screenshots", p.doc)
			if err := copyFile(filepath.Join(artifacts, p.shot), dst); err != nil {
				t.Fatalf("update %s: %v", dst, err)
			}
			t.Logf("updated %s", dst)
		}
	}
}

// receiver is a webhook that accepts alert notifications whose signature
// verifies and refuses the others (which the collector would retry, and the
// delivery log would show).
type receiver struct {
	url    string
	secret []byte
	mu     sync.Mutex
	n      int
}

func startWebhook(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{secret: []byte("e2e-webhook-secret-0123456789abcdef")}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := webhook.Verify(r.secret, req.Header.Get(webhook.SignatureHeader), req.Header.Get(webhook.TimestampHeader), body, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("webhook: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/nbs"
	return r
}

func (r *receiver) config(t *testing.T) alert.Config {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(secret, r.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	c := alert.DefaultConfig()
	c.WebhookURL, c.WebhookSecretFile = r.url, secret
	return c
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// resetLoop connects from A to B's closed port 15 to 40 times a second (a
// wave with a 30 s period, so charts have a shape) until ctx ends; each
// connect draws a NO_SOCKET reset from B.
func resetLoop(ctx context.Context, t *testing.T, lab *netlab.Lab) {
	dst := &unix.SockaddrInet4{Port: int(lab.ClosedPort), Addr: lab.IPB.As4()}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for k := 0; ; k++ {
		n := 3 + (k/15)%6 // per 200 ms tick: 3..8, a step every 3 s
		if (k/15)%12 >= 6 {
			n = 8 - (k/15)%6
		}
		err := lab.Do(lab.A, func() error {
			for i := 0; i < n; i++ {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				err = unix.Connect(fd, dst)
				unix.Close(fd)
				if !errors.Is(err, unix.ECONNREFUSED) {
					return fmt.Errorf("connect to %s:%d: got %v, want ECONNREFUSED", lab.IPB, lab.ClosedPort, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("reset loop: %v", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// startCollector runs a collector with access on, as make run does: it
// writes a fresh admin token to a file, which is returned.
// deadReceiver is the push receiver of the browser test's collector: a
// remote write endpoint nothing listens on, so the export page has a real
// failing receiver to show (its error verbatim, "failing" since no push got
// through). Its match keeps each snapshot to lab-b.
const deadReceiver = "e2e-unreachable"

// withDeadReceiver configures deadReceiver on a closed port of this host.
func withDeadReceiver(t *testing.T) func(*collectorapp.Config) {
	return func(cfg *collectorapp.Config) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // closed: every push is refused at once
		cfg.Push.QueueDir = t.TempDir()
		cfg.Push.Receivers = []string{fmt.Sprintf(`{name: %s, url: "http://%s/api/v1/write", match: "customer=acme"}`, deadReceiver, addr)}
	}
}

func startCollector(t testing.TB, dbURL string, alerts alert.Config, opts ...func(*collectorapp.Config)) (httpAddr, grpcAddr, adminToken string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	cfg := collectorapp.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DBURL, cfg.Alert = "127.0.0.1:0", "127.0.0.1:0", dbURL, alerts
	cfg.Access.BootstrapAdminFile = tokenFile
	for _, o := range opts {
		o(&cfg)
	}
	c := collectorapp.New(cfg, logger(t, "collector"))
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
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector: %v", err)
		}
	})
	g, h := c.Addrs()
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatalf("the bootstrap admin token: %v", err)
	}
	return h, g, strings.TrimSpace(string(tok))
}

// startAgent runs a production agent but for a one-second interval (charts
// fill while the test runs), no periodic snapshot, and evidence enough for
// the reset loop.
func startAgent(t *testing.T, name, netns, collectorAddr string, labels agentapp.Labels, pingTargets string) {
	t.Helper()
	cfg := agentapp.DefaultConfig()
	cfg.NodeName, cfg.Netns, cfg.CollectorAddress, cfg.Labels = name, netns, collectorAddr, labels
	cfg.PingTargets = pingTargets
	cfg.Interval, cfg.SnapshotEvery, cfg.EvidencePerSecond = time.Second, time.Hour, 1000
	// Not the machine's /var/lib/nbs: each test agent has its own.
	dir := t.TempDir()
	cfg.CredentialFile, cfg.SpoolDir = filepath.Join(dir, "node-credential"), filepath.Join(dir, "spool")
	cfg.PinDir = "none" // nothing left counting in the machine's bpffs
	ctx, cancel := context.WithCancel(context.Background())
	a := agentapp.New(cfg, logger(t, "agent:"+cfg.NodeName))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", cfg.NodeName, err)
		}
	})
}

func logger(t testing.TB, part string) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("NBS_TEST_VERBOSE") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(&lineLogger{t: t}, &slog.HandlerOptions{Level: level})).With("part", part)
}

// lineLogger writes whole lines to the test log.
type lineLogger struct {
	t   testing.TB
	mu  sync.Mutex
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		l.t.Log(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

// site is the collector's HTTP side, called with an admin token.
type site struct{ base, token string }

func (s site) do(t testing.TB, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s site) get(t testing.TB, path string) string {
	t.Helper()
	_, body := s.do(t, http.MethodGet, path, "")
	return body
}

// createToken makes a token through the API and returns its secret.
func (s site) createToken(t testing.TB, body string) string {
	t.Helper()
	code, out := s.do(t, http.MethodPost, "/api/v1/tokens", body)
	var created struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &created); code != http.StatusCreated || err != nil || created.Token == "" {
		t.Fatalf("POST /api/v1/tokens %s: HTTP %d %s", body, code, out)
	}
	return created.Token
}

func eventually(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("after %s: %s", timeout, last)
}

func waitReported(t *testing.T, nbs site, nodes ...string) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		body := nbs.get(t, "/api/v1/nodes")
		for _, n := range nodes {
			if !strings.Contains(body, `"name": "`+n+`"`) || strings.Count(body, `"last_report": null`) > 0 {
				return "nodes have not all reported: " + body
			}
		}
		return ""
	})
}

func waitTreeState(t *testing.T, nbs site, node, metric, state string) {
	t.Helper()
	eventually(t, 20*time.Second, func() string {
		body := nbs.get(t, "/api/v1/nodes/"+node+"/tree")
		i := strings.Index(body, `"id": "`+metric+`"`)
		if i < 0 {
			return fmt.Sprintf("tree of %s has no %s yet", node, metric)
		}
		if j := strings.Index(body[i:], `"state": "`); j < 0 || !strings.HasPrefix(body[i+j+len(`"state": "`):], state+`"`) {
			return fmt.Sprintf("%s of %s is not %s yet", metric, node, state)
		}
		return ""
	})
}

// waitAlert waits until the alerts API lists an alert of rule on node in state.
func waitAlert(t *testing.T, nbs site, node, rule, state string) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		body := nbs.get(t, "/api/v1/alerts?state="+state+"&node="+node+"&rule="+rule)
		if !strings.Contains(body, `"rule": "`+rule+`"`) {
			return fmt.Sprintf("no %s alert %s on %s yet: %.300s", state, rule, node, body)
		}
		return ""
	})
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
