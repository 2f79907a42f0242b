package app

import (
	"flag"
	"strings"
	"testing"
	"time"
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

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		var c Config
		c.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
		c.NodeName = "node-1"
		return c
	}
	if err := func() error { c := base(); return c.Validate() }(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	cases := []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Interval = time.Millisecond }, "--interval"},
		{func(c *Config) { c.NodeName = "bad name" }, "--node.name"},
		{func(c *Config) { c.NodeName = "bad name" }, `--node.name "bad name": ' ' is not allowed (a node name is 1-253 letters`},
		{func(c *Config) { c.NodeName = "" }, `--node.name "": empty`},
		{func(c *Config) { c.NodeName = strings.Repeat("n", 254) }, "254 bytes"},
		{func(c *Config) { c.Labels = Labels{"note": "a\x00b"} }, "--labels: label note value: contains a NUL byte"},
		{func(c *Config) { c.Labels = Labels{"note": strings.Repeat("x", 4097)} }, "--labels: label note value: 4097 bytes, at most 4096"},
		{func(c *Config) { c.BufferReports = 0 }, "--buffer.reports"},
		{func(c *Config) { c.SpoolMaxBytes = 1 << 20 }, "--spool.max-bytes 1048576 must be from 4 MiB"},
		{func(c *Config) { c.SnapshotEvery = time.Second }, "--snapshot.every"},
		{func(c *Config) { c.CollectorAddress = "" }, "--collector.address"},
	}
	for _, cs := range cases {
		c := base()
		cs.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), cs.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, cs.want)
		}
	}
}
