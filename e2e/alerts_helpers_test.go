package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/alert/notify/webhook"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// startAlertCollector is startCollector with alerting configured.
func startAlertCollector(tb testing.TB, dbURL, grpcAddr string, ac alert.Config) *collector {
	tb.Helper()
	return startCollector(tb, dbURL, grpcAddr, func(c *collectorapp.Config) { c.Alert = ac })
}

// alertmanagerBinary finds Debian's prometheus-alertmanager. Without it the
// test is skipped, except in CI (CI=true), where skipping would hide that
// the alert path went untested.
func alertmanagerBinary(tb testing.TB) string {
	tb.Helper()
	for _, name := range []string{"prometheus-alertmanager", "alertmanager"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "prometheus-alertmanager not found (apt-get install prometheus-alertmanager)"
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s; CI=true requires it", msg)
	}
	tb.Skip(msg)
	return ""
}

// startAlertmanager runs a real Alertmanager on loopback, routing every
// alert to receiverURL (group_wait as given, group_interval 1s so resolves
// follow quickly, repeat_interval 1h so a duplicate notification within a
// test can only come from a duplicate alert). Grouping by root keeps each
// root's alert in its own group: a storm also raises the drops root, and a
// shared group would be re-sent, with the tcp_reset alert in it, whenever
// the drops alert changed. It returns its base URL.
func startAlertmanager(tb testing.TB, receiverURL string, groupWait time.Duration) string {
	tb.Helper()
	bin := alertmanagerBinary(tb)
	dir := tb.TempDir()
	cfg := fmt.Sprintf(`route:
  receiver: sink
  group_by: [alertname, node, root]
  group_wait: %s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: sink
    webhook_configs:
      - url: %s
        send_resolved: true
`, groupWait, receiverURL)
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	addr := freeAddr(tb)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "alertmanager.yml"), "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start alertmanager: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	base := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-exited:
			tb.Fatalf("alertmanager exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("alertmanager not ready within 15s: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// amAlert is an alert as Alertmanager's API and its webhook show it.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	UpdatedAt   time.Time         `json:"updatedAt"` // API: when Alertmanager last received it
	Status      json.RawMessage   `json:"status"`    // API: an object; webhook: "firing" or "resolved"
}

func (a amAlert) is(labels map[string]string) bool {
	for k, v := range labels {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// activeAlerts is GET /api/v2/alerts: what Alertmanager holds as firing
// (resolved alerts drop out of it).
func activeAlerts(tb testing.TB, base string, labels map[string]string) []amAlert {
	tb.Helper()
	resp, err := http.Get(base + "/api/v2/alerts")
	if err != nil {
		tb.Fatalf("GET alertmanager alerts: %v", err)
	}
	defer resp.Body.Close()
	var all []amAlert
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		tb.Fatalf("decode alertmanager alerts: %v", err)
	}
	var out []amAlert
	for _, a := range all {
		if a.is(labels) {
			out = append(out, a)
		}
	}
	return out
}

// sink receives Alertmanager's notifications on /am and NBS's signed
// webhook on /nbs, verifying every signature, and counts them.
type sink struct {
	srv    *httptest.Server
	secret []byte

	mu     sync.Mutex
	am     []sinkEntry
	nbs    []sinkEntry
	badSig []string
}

type sinkEntry struct {
	at     time.Time
	status string
	alerts []amAlert // Alertmanager: the alerts of the notification
	msg    webhook.Message
}

func newSink(tb testing.TB) *sink {
	s := &sink{secret: []byte("e2e secret: 0123456789abcdef0123456789")}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /am", func(w http.ResponseWriter, r *http.Request) {
		var n struct {
			Status string    `json:"status"`
			Alerts []amAlert `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.am = append(s.am, sinkEntry{at: time.Now(), status: n.Status, alerts: n.Alerts})
		s.mu.Unlock()
	})
	mux.HandleFunc("POST /nbs", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(r.Body)
		err := webhook.Verify(s.secret, r.Header.Get(webhook.SignatureHeader), r.Header.Get(webhook.TimestampHeader), body, now, 5*time.Minute)
		var m webhook.Message
		if err == nil {
			err = json.Unmarshal(body, &m)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.badSig = append(s.badSig, err.Error())
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if r.Header.Get(webhook.DeliveryHeader) != m.Delivery {
			s.badSig = append(s.badSig, "delivery header does not match the body")
		}
		s.nbs = append(s.nbs, sinkEntry{at: now, status: m.Status, msg: m})
	})
	s.srv = httptest.NewServer(mux)
	tb.Cleanup(s.srv.Close)
	return s
}

// alertConfig points the collector at Alertmanager and the sink's webhook.
func (s *sink) alertConfig(tb testing.TB, amURL string) alert.Config {
	file := filepath.Join(tb.TempDir(), "webhook-secret")
	if err := os.WriteFile(file, s.secret, 0o600); err != nil {
		tb.Fatal(err)
	}
	c := alert.DefaultConfig()
	c.AlertmanagerURLs, c.WebhookURL, c.WebhookSecretFile = alert.URLList{amURL}, s.srv.URL+"/nbs", file
	c.LeaderRetry = 200 * time.Millisecond
	return c
}

// amNotified counts Alertmanager notifications carrying a matching alert in
// the given status, and returns the time of the first.
func (s *sink) amNotified(status string, labels map[string]string) (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, first := 0, time.Time{}
	for _, e := range s.am {
		for _, a := range e.alerts {
			if string(a.Status) == `"`+status+`"` && a.is(labels) {
				if n == 0 {
					first = e.at
				}
				n++
			}
		}
	}
	return n, first
}

// nbsNotified counts NBS webhook messages for a node's root in the given status.
func (s *sink) nbsNotified(status, node, root string) (int, time.Time, webhook.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, first, msg := 0, time.Time{}, webhook.Message{}
	for _, e := range s.nbs {
		if e.status == status && e.msg.Alert.Node == node && e.msg.Alert.Root == root {
			if n == 0 {
				first, msg = e.at, e.msg
			}
			n++
		}
	}
	return n, first, msg
}

func (s *sink) signatureErrors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.badSig...)
}

// burstTB turns a recipe's fatal error into a panic that burst recovers from.
type burstTB struct{ testing.TB }

type burstFailed struct{ msg string }

func (b burstTB) Fatalf(format string, args ...any) { panic(burstFailed{fmt.Sprintf(format, args...)}) }
func (b burstTB) Fatal(args ...any)                 { panic(burstFailed{fmt.Sprint(args...)}) }
func (b burstTB) FailNow()                          { panic(burstFailed{"FailNow"}) }

// burst makes n NO_SOCKET resets. A storm makes thousands of blocking
// connects, and netlab's sockets carry SO_SNDTIMEO, so the kernel never
// restarts a connect interrupted by the Go runtime's preemption signal: the
// recipe fails with EINTR now and then. For a storm that is a shorter burst,
// not a failure (netlab closes the socket before it reports, and reports
// after leaving the namespace, so unwinding leaks nothing); any other
// failure fails the test.
func burst(tb testing.TB, lab *netlab.Lab, n int) {
	tb.Helper()
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(burstFailed)
			if !ok {
				panic(r)
			}
			if !strings.Contains(f.msg, "interrupted system call") {
				tb.Fatal(f.msg)
			}
		}
	}()
	lab.ResetNoSocket(burstTB{tb}, n)
}

// storm makes NO_SOCKET resets in bursts of 200 from A to B (far above the
// per-reason crit of 10/s) on the test goroutine, checking cond between
// bursts, until cond returns "" (it returns how long that took) or timeout.
func storm(tb testing.TB, lab *netlab.Lab, timeout time.Duration, cond func() string) time.Duration {
	tb.Helper()
	start := time.Now()
	last := "never checked"
	for time.Since(start) < timeout {
		burst(tb, lab, 200)
		if last = cond(); last == "" {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("storm for %s: %s", timeout, last)
	return 0
}

// stormFor keeps the storm up for d.
func stormFor(tb testing.TB, lab *netlab.Lab, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		burst(tb, lab, 200)
		time.Sleep(20 * time.Millisecond)
	}
}

// apiAlerts is GET /api/v1/alerts of a collector.
type apiAlerts struct {
	Evaluator struct {
		Holder string `json:"holder"`
		Epoch  int64  `json:"epoch"`
	} `json:"evaluator"`
	Alerts []struct {
		ID       int64             `json:"id"`
		Rule     string            `json:"rule"`
		State    string            `json:"state"`
		Node     string            `json:"node"`
		Root     string            `json:"root"`
		Child    string            `json:"child"`
		Summary  string            `json:"summary"`
		TreeURL  string            `json:"tree_url"`
		StartsAt *time.Time        `json:"starts_at"`
		EndsAt   *time.Time        `json:"ends_at"`
		Labels   map[string]string `json:"labels"`
	} `json:"alerts"`
}

func getAlerts(tb testing.TB, c *collector) apiAlerts {
	tb.Helper()
	var out apiAlerts
	if code := c.getJSON(tb, "/api/v1/alerts", &out); code != http.StatusOK {
		tb.Fatalf("GET alerts: HTTP %d", code)
	}
	return out
}

// dump lists what the sink received, for failure messages.
func (s *sink) dump() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, e := range s.nbs {
		fmt.Fprintf(&b, "\n  nbs %s %s %s delivery=%s id=%d metric=%s value=%v", e.at.Format("15:04:05.000"), e.status, e.msg.Alert.Node, e.msg.Delivery, e.msg.Alert.ID, e.msg.Alert.Metric, ptrVal(e.msg.Alert.Value))
	}
	for _, e := range s.am {
		for _, a := range e.alerts {
			fmt.Fprintf(&b, "\n  am  %s %s %s %v", e.at.Format("15:04:05.000"), e.status, a.Status, a.Labels)
		}
	}
	return b.String()
}

func ptrVal(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// amNotifiedAt returns when the k-th (from 1) Alertmanager notification
// carrying a matching alert in the given status arrived.
func (s *sink) amNotifiedAt(status string, labels map[string]string, k int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.am {
		for _, a := range e.alerts {
			if string(a.Status) == `"`+status+`"` && a.is(labels) {
				if n++; n == k {
					return e.at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// nbsNotifiedAt returns the k-th (from 1) webhook message for a node's root
// in the given status, and when it arrived.
func (s *sink) nbsNotifiedAt(status, node, root string, k int) (time.Time, webhook.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.nbs {
		if e.status == status && e.msg.Alert.Node == node && e.msg.Alert.Root == root {
			if n++; n == k {
				return e.at, e.msg, true
			}
		}
	}
	return time.Time{}, webhook.Message{}, false
}
