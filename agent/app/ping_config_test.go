package app

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/netns"
)

func TestPingFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c := DefaultConfig()
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--node.name=n1", "--ping.targets=gw=10.0.0.1,2001:db8::1", "--ping.interval=200ms", "--ping.address=198.18.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid ping flags rejected: %v", err)
	}
	if c.PingInterval != 200*time.Millisecond || c.PingAddress != "198.18.0.1" {
		t.Fatalf("parsed %+v", c)
	}
	cases := []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.PingTargets = "10.0.0.1,not a host!" }, "--ping.targets"},
		{func(c *Config) { c.PingInterval = time.Millisecond }, "--ping.interval"},
		{func(c *Config) { c.PingAddress = "localhost" }, "--ping.address"},
		{func(c *Config) { c.PingAddress = "127.0.0.1" }, "--ping.address"},
		{func(c *Config) { c.PingAddress = "0.0.0.0" }, "--ping.address"},
	}
	for _, cs := range cases {
		c := c
		cs.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), cs.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, cs.want)
		}
	}
	// Unset in a Config built in code (tests, embedding): the defaults.
	zero := Config{CollectorAddress: "x:1", NodeName: "n", Interval: time.Second, BufferReports: 1, SnapshotEvery: time.Second}
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero ping settings rejected: %v", err)
	}
}

func TestPingAddressAnnounced(t *testing.T) {
	self, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ flag, want string }{{"none", ""}, {"::ffff:10.1.2.3", "10.1.2.3"}, {"2001:db8::7", "2001:db8::7"}} {
		cfg := Config{PingAddress: c.flag}
		if got, err := cfg.pingAddress(self); err != nil || got != c.want {
			t.Errorf("--ping.address=%s announces %q, %v; want %q", c.flag, got, err, c.want)
		}
	}
}
