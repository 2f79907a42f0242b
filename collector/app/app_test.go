package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// defaults is the configuration the command-line flags give, plus a
// database URL.
func defaults(t *testing.T) Config {
	t.Helper()
	c := DefaultConfig()
	fs := flag.NewFlagSet("nbs-collector", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--db.url=postgres://nbs@db/nbs"}); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Config)
		want   []string // every problem the error must name; none = valid
	}{
		// Listening on all interfaces, the defaults need a node-auth choice.
		{"the flags' defaults", func(*Config) {}, []string{"--grpc.listen-address :7701 is reachable from other hosts and --grpc.node-auth is not set"}},
		{"the flags' defaults on loopback", func(c *Config) { c.GRPCAddr = "127.0.0.1:7701" }, nil},
		{"the flags' defaults with enrollment", func(c *Config) { c.NodeAuth.Mode = "enroll" }, nil},
		{"TLS with a client CA", func(c *Config) {
			c.Ingest.TLSCertFile, c.Ingest.TLSKeyFile, c.Ingest.ClientCAFile = "c.pem", "k.pem", "ca.pem"
		}, nil},
		{"no database", func(c *Config) { c.DBURL = "" }, []string{"--db.url (or env NBS_DB_URL) is required"}},
		{"a certificate without its key", func(c *Config) { c.Ingest.TLSCertFile = "c.pem" }, []string{"--grpc.tls-cert-file and --grpc.tls-key-file go together"}},
		{"a client CA without a certificate", func(c *Config) { c.Ingest.ClientCAFile = "ca.pem" }, []string{"--grpc.tls-client-ca-file needs"}},
		{"retention under a day", func(c *Config) { c.Retention.Raw = time.Hour }, []string{"--retention 1h0m0s is shorter than one day"}},
		{"too many ping peers", func(c *Config) { c.NodeConfig.PingPeers = 1001 }, []string{"--ping.peers 1001 is more than 1000"}},
		{"no writers", func(c *Config) { c.DBWriters = 0 }, []string{"--db.writers 0 must be from 1 to 64"}},
		{"profiles on loopback", func(c *Config) { c.NodeAuth.Mode, c.PprofAddr = "enroll", "127.0.0.1:7709" }, nil},
		{"profiles reachable from other hosts", func(c *Config) { c.NodeAuth.Mode, c.PprofAddr = "enroll", ":7709" },
			[]string{"--debug.pprof-listen-address :7709 must be a loopback address, e.g. 127.0.0.1:7709"}},
		{"messages too small", func(c *Config) { c.Ingest.MaxMsgSize = 1024 }, []string{"--grpc.max-message-bytes 1024"}},
		{"external URL not absolute", func(c *Config) { c.ExternalURL = "nbs.example.com" }, []string{"--web.external-url"}},
		{"HTTP TLS", func(c *Config) {
			c.NodeAuth.Mode, c.Access.TLSCertFile, c.Access.TLSKeyFile = "enroll", "c.pem", "k.pem"
		}, nil},
		{"HTTP TLS without a key", func(c *Config) { c.Access.TLSCertFile = "c.pem" }, []string{"--http.tls-cert-file and --http.tls-key-file go together"}},
		{"an unknown auth mode", func(c *Config) { c.Access.Mode = "open" }, []string{`--auth.mode "open" must be token, proxy or none`}},
		{"proxy mode without proxies", func(c *Config) { c.Access.Mode = access.ModeProxy }, []string{"--auth.mode=proxy needs --auth.proxy-cidrs"}},
		{"read limits at their bounds", func(c *Config) {
			c.GRPCAddr = "127.0.0.1:7701"
			c.Reads = ReadLimits{PoolSize: 64, StatementTimeout: time.Second, MaxConcurrent: 4, MaxPerCaller: 4}
		}, nil},
		{"no read pool", func(c *Config) { c.Reads.PoolSize = 0 }, []string{"--reads.pool-size 0 must be from 1 to 64"}},
		{"a statement timeout under a second", func(c *Config) { c.Reads.StatementTimeout = time.Millisecond }, []string{"--reads.statement-timeout 1ms must be from 1s to 10m"}},
		{"a statement timeout past the write timeout", func(c *Config) { c.Reads.StatementTimeout = 5 * time.Minute }, []string{"--reads.statement-timeout 5m0s is longer than --http.write-timeout 2m0s"}},
		{"a caller that cannot run one report", func(c *Config) { c.Reads.MaxPerCaller = 3 }, []string{"--reads.max-per-caller 3 must be from 4 (one report) to 1024"}},
		{"fewer slots in all than for one caller", func(c *Config) { c.Reads.MaxConcurrent = 6 }, []string{"--reads.max-concurrent 6 must be from --reads.max-per-caller (8) to 4096"}},
		{"every problem at once", func(c *Config) { c.DBURL, c.DBWriters, c.Retention.Raw = "", 65, time.Minute }, []string{
			"--db.url", "--db.writers 65", "--retention 1m0s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaults(t)
			c.change(&cfg)
			err := cfg.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want it to say %q", err, w)
				}
			}
		})
	}
}

// fakeQueries is a fleet of one node that has not reported yet.
type fakeQueries struct{ api.Queries }

func (fakeQueries) Ping(context.Context) error { return nil }
func (fakeQueries) NodesIn(context.Context, store.Scope) ([]store.Node, error) {
	return []store.Node{{ID: 1, Name: "web-1"}}, nil
}
func (fakeQueries) RootDefinitionsIn(context.Context, store.Scope) (map[int32][]store.MetricDef, error) {
	return nil, nil
}
func (fakeQueries) LatestRootsIn(context.Context, store.Scope) (map[int32]store.Latest, error) {
	return nil, nil
}

type noneConnected struct{}

func (noneConnected) Connected(string) bool { return false }

func (noneConnected) Disconnect(string, error) bool { return false }

// part answers every handler with the part's name and the handler's.
type part string

func (p part) answer(w http.ResponseWriter, h string) { _, _ = io.WriteString(w, string(p)+"."+h) }

func (p part) ListOverrides(w http.ResponseWriter, _ *http.Request)  { p.answer(w, "ListOverrides") }
func (p part) PutOverride(w http.ResponseWriter, _ *http.Request)    { p.answer(w, "PutOverride") }
func (p part) DeleteOverride(w http.ResponseWriter, _ *http.Request) { p.answer(w, "DeleteOverride") }
func (p part) NodeThresholds(w http.ResponseWriter, _ *http.Request) { p.answer(w, "NodeThresholds") }
func (p part) ExpandNode(w http.ResponseWriter, _ *http.Request)     { p.answer(w, "ExpandNode") }
func (p part) ListRules(w http.ResponseWriter, _ *http.Request)      { p.answer(w, "ListRules") }
func (p part) CreateRule(w http.ResponseWriter, _ *http.Request)     { p.answer(w, "CreateRule") }
func (p part) GetRule(w http.ResponseWriter, _ *http.Request)        { p.answer(w, "GetRule") }
func (p part) PutRule(w http.ResponseWriter, _ *http.Request)        { p.answer(w, "PutRule") }
func (p part) DeleteRule(w http.ResponseWriter, _ *http.Request)     { p.answer(w, "DeleteRule") }
func (p part) ListAlerts(w http.ResponseWriter, _ *http.Request)     { p.answer(w, "ListAlerts") }
func (p part) GetAlert(w http.ResponseWriter, _ *http.Request)       { p.answer(w, "GetAlert") }
func (p part) Acknowledge(w http.ResponseWriter, _ *http.Request)    { p.answer(w, "Acknowledge") }
func (p part) Unacknowledge(w http.ResponseWriter, _ *http.Request)  { p.answer(w, "Unacknowledge") }
func (p part) Silence(w http.ResponseWriter, _ *http.Request)        { p.answer(w, "Silence") }
func (p part) Unsilence(w http.ResponseWriter, _ *http.Request)      { p.answer(w, "Unsilence") }

// TestHTTPHandler: the collector's HTTP surface sends each route to the
// part that owns it, and keeps health, metrics and the UI beside the API.
func TestHTTPHandler(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ui") })
	// Everyone is admin; who may is TestAccess's. The Host is what
	// httptest.NewRequest sends.
	acc, err := access.New(nil, access.Config{Mode: access.ModeNone, AllowedHosts: access.StringList{"example.com"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := httpHandler(fakeQueries{}, noneConnected{}, nil, api.Parts{NodeConfig: part("nodeconfig"), Alerts: part("alert")},
		acc, ui, slog.New(slog.DiscardHandler), telemetry.New(), handlerOptions{})
	cases := []struct {
		method, path string
		status       int
		want         string // the whole body, or a part of it
	}{
		{"GET", "/api/v1/thresholds", 200, "nodeconfig.ListOverrides"},
		{"PUT", "/api/v1/thresholds", 200, "nodeconfig.PutOverride"},
		{"DELETE", "/api/v1/thresholds/4", 200, "nodeconfig.DeleteOverride"},
		{"GET", "/api/v1/nodes/web-1/thresholds", 200, "nodeconfig.NodeThresholds"},
		{"POST", "/api/v1/nodes/web-1/expand", 200, "nodeconfig.ExpandNode"},
		{"GET", "/api/v1/alert-rules", 200, "alert.ListRules"},
		{"POST", "/api/v1/alert-rules", 200, "alert.CreateRule"},
		{"GET", "/api/v1/alert-rules/3", 200, "alert.GetRule"},
		{"PUT", "/api/v1/alert-rules/3", 200, "alert.PutRule"},
		{"DELETE", "/api/v1/alert-rules/3", 200, "alert.DeleteRule"},
		{"GET", "/api/v1/alerts", 200, "alert.ListAlerts"},
		{"GET", "/api/v1/alerts/3", 200, "alert.GetAlert"},
		{"POST", "/api/v1/alerts/3/acknowledge", 200, "alert.Acknowledge"},
		{"DELETE", "/api/v1/alerts/3/acknowledge", 200, "alert.Unacknowledge"},
		{"POST", "/api/v1/alerts/3/silence", 200, "alert.Silence"},
		{"DELETE", "/api/v1/alerts/3/silence", 200, "alert.Unsilence"},
		{"GET", "/api/v1/nodes", 200, `"name": "web-1"`},
		{"GET", "/api/v1/openapi.json", 200, `"openapi": "3.0.3"`},
		{"GET", "/api/v1/whoami", 200, `"role": "admin"`},
		{"GET", "/api/v1/nope", 404, `"not_found"`},
		{"PATCH", "/api/v1/alerts", 405, `"method_not_allowed"`},
		{"GET", "/healthz", 200, `"status": "ok"`},
		{"GET", "/readyz", 200, `"status": "ready"`},
		{"GET", "/metrics", 200, "nbs_collector_http_requests_total"},
		{"GET", "/", 200, "ui"},
		{"GET", "/nodes/web-1", 200, "ui"},
	}
	for _, c := range cases {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s %s: HTTP %d %.200q; want %d with %q", c.method, c.path, w.Code, w.Body.String(), c.status, c.want)
		}
	}
}
