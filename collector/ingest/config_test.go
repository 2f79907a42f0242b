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
