package app

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/testlab/configtest"
)

func TestLabelsFlag(t *testing.T) {
	cases := []struct {
		in      string
		want    string
		wantErr string
	}{
		{"customer=acme,rack=r12", "customer=acme,rack=r12", ""},
		{" region=eu , ", "region=eu", ""},
		{"customer", "", "want key=value"},
		{"Customer=acme", "", "lower-case"},
		{"Customer=acme", "", `label key "Customer": 'C' is not allowed`},
		{"1rack=r1", "", "starts with a digit"},
		{"=acme", "", `label key "": empty`},
	}
	for _, c := range cases {
		var l Labels
		err := l.Set(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Set(%q) = %v, want error %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || l.String() != c.want {
			t.Errorf("Set(%q) = %q, %v; want %q", c.in, l.String(), err, c.want)
		}
	}
}

// The flags' defaults are DefaultConfig: the defaults are written once.
func TestRegisterFlagsKeepsDefaults(t *testing.T) {
	configtest.FlagsKeepDefaults(t, DefaultConfig, (*Config).RegisterFlags)
	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--interval=3s", "--tx-timestamping.sample=0"}); err != nil {
		t.Fatal(err)
	}
	if c.Interval != 3*time.Second || c.TxSample != 0 {
		t.Errorf("flags not applied: interval %s, tx sample %d", c.Interval, c.TxSample)
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		c := DefaultConfig()
		c.NodeName = "node-1"
		return c
	}
	cases := []struct {
		name string
		mut  func(*Config)
		want []string // every problem, reported at once; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"built in code with zero ping settings", func(c *Config) { c.PingInterval, c.PingAddress = 0, "" }, nil},
		{"tx timestamping off", func(c *Config) { c.TxSample = 0 }, nil},
		{"interval", func(c *Config) { c.Interval = time.Millisecond }, []string{"--interval"}},
		{"node name", func(c *Config) { c.NodeName = "bad name" }, []string{"--node.name"}},
		{"buffer", func(c *Config) { c.BufferReports = 0 }, []string{"--buffer.reports"}},
		{"snapshot", func(c *Config) { c.SnapshotEvery = time.Second }, []string{"--snapshot.every"}},
		{"collector", func(c *Config) { c.CollectorAddress = "" }, []string{"--collector.address"}},
		{"tx sample", func(c *Config) { c.TxSample = 1<<20 + 1 }, []string{"--tx-timestamping.sample"}},
		{"budget", func(c *Config) { c.OverheadBudget = 101 }, []string{"--overhead.budget"}},
		{"rx sample every packet", func(c *Config) { c.LatencyRXSample = 1 }, nil},
		{"flows top", func(c *Config) { c.FlowsTop = 5000 }, []string{"--flows.top 5000 must be from 1 to 1999"}},
		{"flows every", func(c *Config) { c.FlowsEvery = -time.Second }, []string{"--flows.every -1s must be from 0 (every report) to 1h"}},
		{"rx sample not a power of two", func(c *Config) { c.LatencyRXSample = 12 }, []string{"--latency.rx.sample 12 must be a power of two from 1 to 1024"}},
		{"rx sample too sparse", func(c *Config) { c.LatencyRXSample = 2048 }, []string{"--latency.rx.sample 2048"}},
		{"rx sample negative", func(c *Config) { c.LatencyRXSample = -16 }, []string{"--latency.rx.sample -16"}},
		{"evidence per interval", func(c *Config) { c.EvidencePerInterval = 251 }, []string{"--evidence.per-interval"}},
		{"triggered", func(c *Config) { c.TriggeredHold, c.TriggeredMax = -1, time.Millisecond }, []string{"--triggered.hold", "--triggered.max"}},
		{"everything at once", func(c *Config) {
			c.CollectorAddress, c.NodeName, c.Interval, c.BufferReports = "", "", time.Hour+1, 0
			c.EvidencePerSecond, c.PingTargets, c.PingInterval, c.PingAddress = 100_001, "bad host!", time.Nanosecond, "127.0.0.1"
		}, []string{"--collector.address", "--node.name", "--interval", "--buffer.reports", "--evidence.per-second",
			"--ping.targets", "--ping.interval", "--ping.address", "--snapshot.every", "--triggered.max"}},
		{"node name detail", func(c *Config) { c.NodeName = "bad name" }, []string{`--node.name "bad name": ' ' is not allowed (a node name is 1-253 letters`}},
		{"empty node name", func(c *Config) { c.NodeName = "" }, []string{`--node.name "": empty`}},
		{"long node name", func(c *Config) { c.NodeName = strings.Repeat("n", 254) }, []string{"254 bytes"}},
		{"NUL in a label", func(c *Config) { c.Labels = Labels{"note": "a\x00b"} }, []string{"--labels: label note value: contains a NUL byte"}},
		{"long label", func(c *Config) { c.Labels = Labels{"note": strings.Repeat("x", 4097)} }, []string{"--labels: label note value: 4097 bytes, at most 4096"}},
		{"spool bound", func(c *Config) { c.SpoolMaxBytes = 1 << 20 }, []string{"--spool.max-bytes 1048576 must be from 4 MiB"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mut(&c)
			configtest.Problems(t, c.Validate(), tc.want...)
		})
	}
}

// Where the probes pin, by --bpf.pin-dir, and which values are refused.
func TestPinDir(t *testing.T) {
	tests := []struct {
		flag, want, wantErr string
	}{
		{"", DefaultPinRoot + "/node-1", ""},
		{"none", "", ""},
		{"/sys/fs/bpf/custom", "/sys/fs/bpf/custom", ""},
		{"relative/dir", "", "must be an absolute directory"},
		{"/", "", "must be an absolute directory"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		c.NodeName, c.PinDir = "node-1", tt.flag
		err := c.Validate()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("--bpf.pin-dir %q: %v, want %q", tt.flag, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.pinDir() != tt.want {
			t.Errorf("--bpf.pin-dir %q: %q, %v; want %q", tt.flag, c.pinDir(), err, tt.want)
		}
	}
	c := DefaultConfig()
	c.FlushTimeout = -time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--shutdown.flush-timeout") {
		t.Errorf("negative flush timeout: %v", err)
	}
}
