package app

import (
	"flag"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/internal/testlab/configtest"
)

// The flags' defaults are DefaultConfig: the defaults are written once.
func TestRegisterFlagsKeepsDefaults(t *testing.T) {
	configtest.FlagsKeepDefaults(t, DefaultConfig, (*Config).RegisterFlags)
	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--db.writers=8", "--alert.resend-interval=30s", "--alertmanager.url=http://a:9093,http://b:9093"}); err != nil {
		t.Fatal(err)
	}
	if c.DBWriters != 8 || c.Alert.ResendInterval != 30*time.Second || len(c.Alert.AlertmanagerURLs) != 2 {
		t.Errorf("flags not applied: %+v", c)
	}
}

func TestDefaultConfigValidate(t *testing.T) {
	// On loopback, so the default node-auth is valid (nodeauth_test.go
	// has the rule for other addresses).
	base := func() Config {
		c := DefaultConfig()
		c.DBURL, c.GRPCAddr = "postgres://nbs@db/nbs", "127.0.0.1:7701"
		return c
	}
	cases := []struct {
		name string
		mut  func(*Config)
		want []string // every problem, reported at once; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"default address without node-auth", func(c *Config) { c.GRPCAddr = DefaultConfig().GRPCAddr },
			[]string{"--grpc.listen-address :7701 is reachable from other hosts and --grpc.node-auth is not set"}},
		{"default address with enrollment", func(c *Config) {
			c.GRPCAddr, c.NodeAuth.Mode, c.NodeAuth.BootstrapTokenFile = DefaultConfig().GRPCAddr, "enroll", "/etc/nbs/bootstrap-token"
		}, nil},
		{"default address and an identity map without mtls", func(c *Config) { c.GRPCAddr, c.NodeAuth.IdentityMapFile = ":7701", "map" },
			[]string{"--grpc.listen-address :7701 is reachable", "--grpc.node-identity-map-file is for --grpc.node-auth=mtls"}},
		{"no ping mesh", func(c *Config) { c.NodeConfig.PingPeers = 0 }, nil},
		{"mutual TLS", func(c *Config) {
			c.Ingest.TLSCertFile, c.Ingest.TLSKeyFile, c.Ingest.ClientCAFile = "c.pem", "k.pem", "ca.pem"
		}, nil},
		{"alerting", func(c *Config) {
			c.Alert.AlertmanagerURLs = alert.URLList{"http://am:9093"}
			c.Alert.WebhookURL, c.Alert.WebhookSecretFile = "https://hooks.example.com/nbs", "/etc/nbs/secret"
		}, nil},
		{"no database", func(c *Config) { c.DBURL = "" }, []string{"--db.url"}},
		{"read replica", func(c *Config) { c.DBReadURL = "postgres://nbs@standby/nbs" }, nil},
		{"read replica not a URL", func(c *Config) { c.DBReadURL = "postgres://nbs:secret@standby:port/nbs" }, []string{"--db.read-url"}},
		{"TLS key alone", func(c *Config) { c.Ingest.TLSKeyFile = "k.pem" }, []string{"--grpc.tls-cert-file and --grpc.tls-key-file"}},
		{"client CA without TLS", func(c *Config) { c.Ingest.ClientCAFile = "ca.pem" }, []string{"--grpc.tls-client-ca-file"}},
		{"retention", func(c *Config) { c.Retention.Raw = time.Hour }, []string{"--retention"}},
		{"retentions of the rest", func(c *Config) {
			c.Retention.Nodes, c.Retention.Alerts, c.Retention.Audit = time.Hour, 0, 200*365*24*time.Hour
		},
			[]string{"--retention.nodes 1h0m0s", "--retention.alerts 0s", "--retention.audit 1752000h0m0s"}},
		{"writers", func(c *Config) { c.DBWriters = 0 }, []string{"--db.writers"}},
		{"counterpart label", func(c *Config) { c.CounterpartLabel = "Cluster Name" }, []string{`--counterparts.label "Cluster Name"`}},
		{"message size", func(c *Config) { c.Ingest.MaxMsgSize = 1 << 30 }, []string{"--grpc.max-message-bytes"}},
		{"stream window", func(c *Config) { c.Ingest.StreamWindow = 1024 }, []string{"stream window"}},
		{"external URL", func(c *Config) { c.ExternalURL = "nbs.example.com" }, []string{"--web.external-url"}},
		{"alert resend", func(c *Config) { c.Alert.ResendInterval = 0 }, []string{"--alert.resend-interval"}},
		{"report definition limits", func(c *Config) { c.Reports.MaxDefinitions, c.Reports.MaxDefinitionsPerTenant = 5, 6 },
			[]string{"--reports.max-definitions-per-tenant 6 must be from 1 to --reports.max-definitions (5)"}},
		{"report definition limits left zero are the defaults", func(c *Config) { c.Reports = report.Config{} }, nil},
		{"HTTP timeouts off", func(c *Config) {
			c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout, c.HTTP.WriteTimeout, c.HTTP.IdleTimeout = 0, 0, 0, 0
		},
			[]string{"--http.read-header-timeout 0s", "--http.read-timeout 0s", "--http.write-timeout 0s", "--http.idle-timeout 0s"}},
		{"HTTP timeouts out of order", func(c *Config) {
			c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout, c.HTTP.WriteTimeout = time.Minute, 30*time.Second, 10*time.Second
		},
			[]string{"--http.read-header-timeout 1m0s is longer than --http.read-timeout", "--http.read-timeout 30s is longer than --http.write-timeout",
				"--reads.statement-timeout 30s is longer than --http.write-timeout 10s"}},
		{"HTTP headers and connections", func(c *Config) { c.HTTP.MaxHeaderBytes, c.HTTP.MaxConns = 100, 0 },
			[]string{"--http.max-header-bytes 100", "--http.max-connections 0"}},
		{"HTTP connections per address", func(c *Config) { c.HTTP.MaxConnsPerAddress = 0 }, []string{"--http.max-connections-per-address 0"}},
		{"HTTP connections per address over the total", func(c *Config) { c.HTTP.MaxConns, c.HTTP.MaxConnsPerAddress = 100, 101 },
			[]string{"--http.max-connections-per-address 101 must be from 1 to --http.max-connections (100)"}},
		{"gRPC connections", func(c *Config) { c.Ingest.MaxConns, c.Ingest.MaxConnsPerAddress = 10, 11 },
			[]string{"--grpc.max-connections-per-address 11 is more than --grpc.max-connections 10"}},
		{"gRPC connections per address", func(c *Config) { c.Ingest.MaxConnsPerAddress = -1 }, []string{"--grpc.max-connections-per-address -1"}},
		{"gRPC connections per address over the streams' total", func(c *Config) { c.Ingest.MaxStreams, c.Ingest.MaxConnsPerAddress = 10, 21 },
			[]string{"--grpc.max-connections-per-address 21 is more than --grpc.max-connections 20"}},
		{"send timeout", func(c *Config) { c.Ingest.SendTimeout = 0 }, []string{"--grpc.send-timeout 0s"}},
		{"overrides cap", func(c *Config) { c.NodeConfig.MaxOverrides = 0 }, []string{"--thresholds.max-overrides 0"}},
		{"everything at once", func(c *Config) {
			c.DBURL, c.GRPCAddr, c.HTTPAddr, c.Ingest.TLSCertFile = "", "", "", "c.pem"
			c.Retention.Raw, c.NodeConfig.PingPeers, c.DBWriters, c.Ingest.MaxMsgSize, c.Ingest.StreamWindow = 0, 1001, 65, 0, 0
			c.ExternalURL = "ftp://nbs"
			c.Alert.AlertmanagerURLs = alert.URLList{"am:9093"}
			c.Alert.WebhookURL, c.Alert.ResendInterval, c.Alert.LeaderRetry, c.Alert.Lookback = "hooks", 0, 0, 0
		}, []string{"--db.url", "--grpc.listen-address", "--http.listen-address", "--grpc.tls-cert-file and --grpc.tls-key-file",
			"--retention", "--ping.peers", "--db.writers", "--grpc.max-message-bytes", "stream window", "--web.external-url",
			"--alertmanager.url", "--alert.webhook-url", "--alert.webhook-secret-file", "--alert.resend-interval",
			"alert leader retry", "alert lookback"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mut(&c)
			configtest.Problems(t, c.Validate(), tc.want...)
		})
	}
}
