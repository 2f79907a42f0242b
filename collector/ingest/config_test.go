package ingest

import (
	"testing"

	"github.com/nbs-project/nbs/internal/testlab/configtest"
)

func TestConfigFlagsKeepDefaults(t *testing.T) {
	configtest.FlagsKeepDefaults(t, DefaultConfig, (*Config).RegisterFlags)
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Config)
		want []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"mutual TLS", func(c *Config) { c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = "c.pem", "k.pem", "ca.pem" }, nil},
		{"a key alone", func(c *Config) { c.TLSKeyFile = "k.pem" }, []string{"--grpc.tls-cert-file and --grpc.tls-key-file go together"}},
		{"a client CA without a certificate", func(c *Config) { c.ClientCAFile = "ca.pem" }, []string{"--grpc.tls-client-ca-file needs"}},
		{"limits out of range", func(c *Config) { c.MaxStreams, c.MaxEvents, c.MaxFutureSkew = 0, 1<<21, -1 }, []string{
			"--ingest.max-streams 0 must be from 1 to 1048576", "--ingest.max-events 2097152", "--ingest.max-future-skew -1ns"}},
		{"stream bounds", func(c *Config) { c.HelloTimeout, c.SendTimeout, c.MaxMsgSize, c.StreamWindow = 0, 0, 0, 0 }, []string{
			"--ingest.hello-timeout 0s", "--grpc.send-timeout 0s", "--grpc.max-message-bytes 0", "stream window 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mut(&c)
			configtest.Problems(t, c.Validate(), tc.want...)
		})
	}
}

// Connection bounds left at zero follow the stream limits, so an operator
// who raises --ingest.max-streams-per-address for agents behind one NAT
// need not find a second flag; set ones are kept.
func TestConnsFollowStreams(t *testing.T) {
	cases := []struct {
		name                      string
		streams, perIP            int
		conns, connsPerAddr       int
		wantTotal, wantPerAddress int
	}{
		{"defaults", DefaultLimits().MaxStreams, DefaultLimits().MaxStreamsPerIP, 0, 0, 2 * DefaultLimits().MaxStreams, 2 * DefaultLimits().MaxStreamsPerIP},
		{"a fleet behind NAT", 30000, 30000, 0, 0, 60000, 60000},
		{"per address bounded by the total", 10, 50, 0, 0, 20, 20},
		{"set explicitly", 30000, 30000, 100, 7, 100, 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxStreams, cfg.MaxStreamsPerIP, cfg.MaxConns, cfg.MaxConnsPerAddress = c.streams, c.perIP, c.conns, c.connsPerAddr
			if total, per := cfg.Conns(); total != c.wantTotal || per != c.wantPerAddress {
				t.Errorf("Conns() = %d, %d; want %d, %d", total, per, c.wantTotal, c.wantPerAddress)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}
