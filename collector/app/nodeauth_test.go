package app

import (
	"strings"
	"testing"

	"github.com/nbs-project/nbs/collector/nodeauth"
)

func TestNodeAuthMode(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want nodeauth.Mode
		err  string
	}{
		{"nothing configured", Config{}, nodeauth.ModeNone, ""},
		{"a client CA implies mtls", Config{GRPCClientCA: "ca.pem"}, nodeauth.ModeMTLS, ""},
		{"a bootstrap token implies enroll", Config{BootstrapTokenFile: "token"}, nodeauth.ModeEnroll, ""},
		{"explicit none beside a client CA", Config{NodeAuth: "none", GRPCClientCA: "ca.pem"}, nodeauth.ModeNone, ""},
		{"enroll without a token: operator-enrolled nodes only", Config{NodeAuth: "enroll"}, nodeauth.ModeEnroll, ""},
		{"enroll with TLS and a client CA", Config{NodeAuth: "enroll", GRPCClientCA: "ca.pem", BootstrapTokenFile: "token"}, nodeauth.ModeEnroll, ""},
		{"both files, no choice", Config{GRPCClientCA: "ca.pem", BootstrapTokenFile: "token"}, "", "choose how node names are verified"},
		{"unknown mode", Config{NodeAuth: "tofu"}, "", `--grpc.node-auth "tofu": use none, enroll or mtls`},
		{"mtls without a client CA", Config{NodeAuth: "mtls"}, "", "needs --grpc.tls-client-ca-file"},
		{"a token outside enroll", Config{NodeAuth: "mtls", GRPCClientCA: "ca.pem", BootstrapTokenFile: "token"}, "", "--grpc.bootstrap-token-file is for --grpc.node-auth=enroll"},
		{"an identity map outside mtls", Config{NodeIdentityMapFile: "map"}, "", "--grpc.node-identity-map-file is for --grpc.node-auth=mtls"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.cfg.nodeAuthMode()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("nodeAuthMode = %q, %v; want an error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("nodeAuthMode = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
