package tlsfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigErrorsSayWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"server without key", second(Server("cert.pem", "", "")), "both a certificate and a key"},
		{"server cert missing", second(Server(filepath.Join(dir, "no.pem"), filepath.Join(dir, "no-key.pem"), "")), "load TLS certificate"},
		{"client CA missing", second(Client(filepath.Join(dir, "none.pem"), "", "", "")), "read CA file"},
		{"client CA not PEM", second(Client(notPEM, "", "", "")), "holds no PEM certificate"},
		{"client cert without key", second(Client("", "agent.pem", "", "")), "both a certificate and a key"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	if cfg, err := Client("", "", "", "collector.example"); err != nil || cfg.ServerName != "collector.example" || cfg.RootCAs != nil {
		t.Errorf("system roots with a server name: %+v, %v", cfg, err)
	}
}

func second[T any](_ T, err error) error { return err }
