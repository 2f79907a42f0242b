package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// prometheusBinary finds Debian's prometheus. Without it the test is
// skipped, except in CI (CI=true), where skipping would hide that the
// scrape went untested.
func prometheusBinary(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	const msg = "prometheus not found (apt-get install prometheus)"
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s; CI=true requires it", msg)
	}
	tb.Skip(msg)
	return ""
}

// scrapeJob is one scrape of the collector's export: as a user writes it
// in prometheus.yml, with the bearer token as Prometheus's authorization
// credentials and ?match= as params.
type scrapeJob struct {
	name   string
	target string // host:port of the collector's HTTP side
	token  string
	match  string // ?match=, "" for none
}

// promServer is a real Prometheus the test started.
type promServer struct {
	tb   testing.TB
	base string
}

// startPrometheus runs Debian's Prometheus on loopback with its own TSDB
// directory, scraping every job each second, and stops it (by its PID)
// when the test ends. It returns once Prometheus is ready; the jobs'
// first scrapes may still be on their way (waitUp).
func startPrometheus(tb testing.TB, jobs ...scrapeJob) *promServer {
	tb.Helper()
	return startPrometheusWithRules(tb, "", jobs...)
}

// startPrometheusWithRules is startPrometheus with a rule file's text
// (recording and alerting rules, evaluated each second).
func startPrometheusWithRules(tb testing.TB, rules string, jobs ...scrapeJob) *promServer {
	tb.Helper()
	bin := prometheusBinary(tb)
	dir := tb.TempDir()
	var cfg strings.Builder
	// The scrape timeout is the interval: the export of a small lab takes
	// milliseconds, and a slow one should show as a failed scrape (up 0),
	// not as scrapes that overlap.
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	if rules != "" {
		file := filepath.Join(dir, "rules.yml")
		if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
			tb.Fatal(err)
		}
		fmt.Fprintf(&cfg, "rule_files: [%q]\n", file)
	}
	cfg.WriteString("scrape_configs:\n")
	for _, j := range jobs {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    metrics_path: /api/v1/export/metrics\n", j.name)
		if j.match != "" {
			fmt.Fprintf(&cfg, "    params:\n      match: [%q]\n", j.match)
		}
		if j.token != "" {
			file := filepath.Join(dir, j.name+".token")
			if err := os.WriteFile(file, []byte(j.token), 0o600); err != nil {
				tb.Fatal(err)
			}
			fmt.Fprintf(&cfg, "    authorization:\n      credentials_file: %s\n", file)
		}
		fmt.Fprintf(&cfg, "    static_configs:\n      - targets: [%q]\n", j.target)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(cfg.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	addr := freeAddr(tb)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		// SIGTERM lets it close its TSDB; a Prometheus that hangs is
		// killed, never left behind.
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if tb.Failed() {
			tb.Logf("prometheus's log:\n%s\nits configuration:\n%s", out.String(), cfg.String())
		}
	})
	p := &promServer{tb: tb, base: "http://" + addr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-exited:
			tb.Fatalf("prometheus exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("prometheus not ready within 20s: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// promSample is one element of a query's answer: an instant vector's
// series (one value) or a range's (values).
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  promPoint         `json:"value"`
	Values []promPoint       `json:"values"`
}

// promPoint is [unix seconds, "value"] as Prometheus's API writes it.
type promPoint struct {
	T time.Time
	V float64
}

func (p *promPoint) UnmarshalJSON(b []byte) error {
	var raw [2]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	var ts float64
	var v string
	if err := json.Unmarshal(raw[0], &ts); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[1], &v); err != nil {
		return err
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	// Prometheus's timestamps are whole milliseconds.
	p.T, p.V = time.UnixMilli(int64(ts*1000+0.5)), f
	return nil
}

// query runs expr at instant at (now when zero) through Prometheus's HTTP
// API. A query Prometheus refuses fails the test: every expression a test
// or dashboard sends must be valid PromQL.
func (p *promServer) query(expr string, at time.Time) []promSample {
	p.tb.Helper()
	out, err := p.tryQuery(expr, at)
	if err != nil {
		p.tb.Fatal(err)
	}
	return out
}

func (p *promServer) tryQuery(expr string, at time.Time) ([]promSample, error) {
	q := url.Values{"query": {expr}}
	if !at.IsZero() {
		q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	resp, err := http.PostForm(p.base+"/api/v1/query", q)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("query %s: read the answer: %w", expr, err)
	}
	var ans struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("query %s: HTTP %d %.300s: %w", expr, resp.StatusCode, body, err)
	}
	if ans.Status != "success" {
		return nil, fmt.Errorf("query %s: HTTP %d: %s", expr, resp.StatusCode, ans.Error)
	}
	if ans.Data.ResultType == "scalar" {
		// A scalar is [t, "v"]: one series without labels.
		var s struct {
			Data struct {
				Result promPoint `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &s); err != nil {
			return nil, fmt.Errorf("query %s: %w", expr, err)
		}
		return []promSample{{Value: s.Data.Result}}, nil
	}
	return ans.Data.Result, nil
}

// scalar runs expr, which must answer one series, and returns its value.
func (p *promServer) scalar(expr string, at time.Time) (float64, error) {
	out, err := p.tryQuery(expr, at)
	if err != nil {
		return 0, err
	}
	if len(out) != 1 {
		return 0, fmt.Errorf("%s at %s: %d series, want one: %v", expr, at.Format(time.RFC3339Nano), len(out), out)
	}
	return out[0].Value.V, nil
}

// waitUp waits until Prometheus has scraped job successfully.
func (p *promServer) waitUp(job string) {
	p.tb.Helper()
	eventually(p.tb, 30*time.Second, func() string {
		v, err := p.scalar(fmt.Sprintf("up{job=%q}", job), time.Time{})
		if err != nil || v != 1 {
			return fmt.Sprintf("job %s is not up: %v %v; targets: %s", job, v, err, p.targets())
		}
		return ""
	})
}

// ruleHealth is each rule's health as Prometheus evaluated it last
// ("ok", "err" with its error, or "unknown" before its first evaluation).
func (p *promServer) ruleHealth() map[string]string {
	p.tb.Helper()
	resp, err := http.Get(p.base + "/api/v1/rules")
	if err != nil {
		p.tb.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		p.tb.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range ans.Data.Groups {
		for _, r := range g.Rules {
			out[r.Name] = strings.TrimSpace(r.Health + " " + r.LastError)
		}
	}
	return out
}

// targets is what Prometheus says of its scrapes (their last errors).
func (p *promServer) targets() string {
	resp, err := http.Get(p.base + "/api/v1/targets")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
