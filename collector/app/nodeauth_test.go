package app

import (
	"strings"
	"testing"

	"github.com/nbs-project/nbs/collector/ingest"
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
		{"a client CA implies mtls", Config{Ingest: ingest.Config{ClientCAFile: "ca.pem"}}, nodeauth.ModeMTLS, ""},
		{"a bootstrap token implies enroll", Config{NodeAuth: nodeauth.Config{BootstrapTokenFile: "token"}}, nodeauth.ModeEnroll, ""},
		{"explicit none beside a client CA", Config{NodeAuth: nodeauth.Config{Mode: "none"}, Ingest: ingest.Config{ClientCAFile: "ca.pem"}}, nodeauth.ModeNone, ""},
		{"enroll without a token: operator-enrolled nodes only", Config{NodeAuth: nodeauth.Config{Mode: "enroll"}}, nodeauth.ModeEnroll, ""},
		{"enroll with TLS and a client CA", Config{NodeAuth: nodeauth.Config{Mode: "enroll", BootstrapTokenFile: "token"}, Ingest: ingest.Config{ClientCAFile: "ca.pem"}}, nodeauth.ModeEnroll, ""},
		{"both files, no choice", Config{NodeAuth: nodeauth.Config{BootstrapTokenFile: "token"}, Ingest: ingest.Config{ClientCAFile: "ca.pem"}}, "", "choose how node names are verified"},
		{"unknown mode", Config{NodeAuth: nodeauth.Config{Mode: "tofu"}}, "", `--grpc.node-auth "tofu": use none, enroll or mtls`},
		{"mtls without a client CA", Config{NodeAuth: nodeauth.Config{Mode: "mtls"}}, "", "needs --grpc.tls-client-ca-file"},
		{"a token outside enroll", Config{NodeAuth: nodeauth.Config{Mode: "mtls", BootstrapTokenFile: "token"}, Ingest: ingest.Config{ClientCAFile: "ca.pem"}}, "", "--grpc.bootstrap-token-file is for --grpc.node-auth=enroll"},
		{"an identity map outside mtls", Config{NodeAuth: nodeauth.Config{IdentityMapFile: "map"}}, "", "--grpc.node-identity-map-file is for --grpc.node-auth=mtls"},
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

// Where other hosts can connect, none is never a default: the operator
// passes --grpc.node-auth, or a file that chooses enroll or mtls. Loopback
// keeps none, so make run needs no configuration.
func TestNodeAuthOffLoopback(t *testing.T) {
	const refused = "is reachable from other hosts and --grpc.node-auth is not set"
	cases := []struct {
		addr string
		cfg  Config
		want nodeauth.Mode
		err  string
	}{
		{"127.0.0.1:7701", Config{}, nodeauth.ModeNone, ""},
		{"127.0.0.1:0", Config{}, nodeauth.ModeNone, ""},
		{"127.3.4.5:7701", Config{}, nodeauth.ModeNone, ""},
		{"[::1]:7701", Config{}, nodeauth.ModeNone, ""},
		{"localhost:7701", Config{}, nodeauth.ModeNone, ""},
		{"LOCALHOST:7701", Config{}, nodeauth.ModeNone, ""},
		{"127.0.0.1:7701", Config{NodeAuth: nodeauth.Config{Mode: "enroll"}}, nodeauth.ModeEnroll, ""},

		{":7701", Config{}, "", "--grpc.listen-address :7701 " + refused},
		{"0.0.0.0:7701", Config{}, "", "--grpc.listen-address 0.0.0.0:7701 " + refused},
		{"[::]:7701", Config{}, "", refused},
		{"10.0.0.5:7701", Config{}, "", refused},
		{"nbs.example.net:7701", Config{}, "", refused},
		{"not an address", Config{}, "", refused},
		{":7701", Config{}, "", "pass --grpc.node-auth=enroll --grpc.bootstrap-token-file FILE"},
		{":9000", Config{}, "", "or listen on loopback only (--grpc.listen-address 127.0.0.1:9000)"},

		{":7701", Config{NodeAuth: nodeauth.Config{Mode: "none"}}, nodeauth.ModeNone, ""},
		{":7701", Config{NodeAuth: nodeauth.Config{Mode: "enroll"}}, nodeauth.ModeEnroll, ""},
		{":7701", Config{NodeAuth: nodeauth.Config{Mode: "mtls"}, Ingest: ingest.Config{ClientCAFile: "ca.pem"}}, nodeauth.ModeMTLS, ""},
		{"10.0.0.5:7701", Config{NodeAuth: nodeauth.Config{BootstrapTokenFile: "token"}}, nodeauth.ModeEnroll, ""},
		{"10.0.0.5:7701", Config{Ingest: ingest.Config{ClientCAFile: "ca.pem"}}, nodeauth.ModeMTLS, ""},
		// Beside another problem, not instead of it (TestDefaultConfigValidate has both).
		{":7701", Config{NodeAuth: nodeauth.Config{IdentityMapFile: "map"}}, "", refused},
	}
	for _, c := range cases {
		c.cfg.GRPCAddr = c.addr
		t.Run(c.addr+" "+c.cfg.NodeAuth.Mode, func(t *testing.T) {
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

// What a valid configuration still exposes is warned of; loopback exposes
// nothing.
func TestNodeAuthWarnings(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want []string // what the one warning says; none: no warning
	}{
		{"none on loopback", Config{GRPCAddr: "127.0.0.1:7701", NodeAuth: nodeauth.Config{Mode: "none"}}, nil},
		{"enroll in plaintext on loopback", Config{GRPCAddr: "[::1]:7701", NodeAuth: nodeauth.Config{Mode: "enroll"}}, nil},
		{"none reachable, plaintext", Config{GRPCAddr: ":7701", NodeAuth: nodeauth.Config{Mode: "none"}},
			[]string{"--grpc.node-auth=none on --grpc.listen-address :7701, which other hosts can reach: anyone who reaches it can report as any node"}},
		{"none reachable, plaintext says so", Config{GRPCAddr: ":7701", NodeAuth: nodeauth.Config{Mode: "none"}}, []string{"the streams are plaintext too"}},
		{"none reachable over TLS", Config{GRPCAddr: "0.0.0.0:7701", NodeAuth: nodeauth.Config{Mode: "none"}, Ingest: ingest.Config{TLSCertFile: "c.pem", TLSKeyFile: "k.pem"}},
			[]string{"use --grpc.node-auth=enroll or mtls"}},
		{"enroll in plaintext reachable", Config{GRPCAddr: ":7701", NodeAuth: nodeauth.Config{BootstrapTokenFile: "token"}},
			[]string{"nodes enroll over plaintext on --grpc.listen-address :7701, which other hosts can reach", "set --grpc.tls-cert-file and --grpc.tls-key-file"}},
		{"enroll over TLS", Config{GRPCAddr: ":7701", NodeAuth: nodeauth.Config{Mode: "enroll"}, Ingest: ingest.Config{TLSCertFile: "c.pem", TLSKeyFile: "k.pem"}}, nil},
		{"mtls", Config{GRPCAddr: ":7701", Ingest: ingest.Config{TLSCertFile: "c.pem", TLSKeyFile: "k.pem", ClientCAFile: "ca.pem"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mode, err := c.cfg.nodeAuthMode()
			if err != nil {
				t.Fatal(err)
			}
			got := c.cfg.nodeAuthWarnings(mode)
			if len(c.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("warnings %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("warnings %q, want one", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("warning %q does not say %q", got[0], w)
				}
			}
			if c.cfg.Ingest.TLSCertFile != "" && strings.Contains(got[0], "plaintext") {
				t.Errorf("warning %q calls TLS streams plaintext", got[0])
			}
		})
	}
}
