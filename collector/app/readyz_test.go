package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

// A collector other hosts can reach does not start without a node-auth
// choice; one that runs with nodes anyone may register (none), or enrolls
// them in plaintext, says so in its log and in /readyz, and stays ready.
func TestReadyzWarnsOfNodesOthersMayRegister(t *testing.T) {
	refused := DefaultConfig()
	refused.DBURL, refused.GRPCAddr, refused.HTTPAddr = "postgres://nbs@127.0.0.1:1/nbs", ":0", "127.0.0.1:0"
	err := New(refused, slog.New(slog.DiscardHandler)).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--grpc.listen-address :0 is reachable from other hosts and --grpc.node-auth is not set") ||
		!strings.Contains(err.Error(), "pass --grpc.node-auth=enroll --grpc.bootstrap-token-file FILE") {
		t.Fatalf("Run on :0 without --grpc.node-auth = %v, want it refused", err)
	}

	dbURL := pgcluster.Database(t)
	cases := []struct {
		name     string
		grpcAddr string
		nodeAuth string
		want     string // in the one warning; "": no warnings
	}{
		{"none on loopback", "127.0.0.1:0", "", ""},
		{"enroll in plaintext on loopback", "127.0.0.1:0", "enroll", ""},
		// All interfaces: the test's port is open to the network while it runs.
		{"none reachable", ":0", "none", "--grpc.node-auth=none on --grpc.listen-address :0, which other hosts can reach"},
		{"enroll in plaintext reachable", ":0", "enroll", "nodes enroll over plaintext on --grpc.listen-address :0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GRPCAddr, cfg.HTTPAddr, cfg.DBURL, cfg.NodeAuth.Mode = tc.grpcAddr, "127.0.0.1:0", dbURL, tc.nodeAuth
			var logs lockedBuffer
			c, stop := startCollectorLogging(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			defer stop()
			_, addr := c.Addrs()
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Status   string   `json:"status"`
				Warnings []string `json:"warnings"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 || body.Status != "ready" {
				t.Fatalf("readyz: HTTP %d %+v %v; want 200 ready", resp.StatusCode, body, err)
			}
			if tc.want == "" {
				if len(body.Warnings) != 0 {
					t.Errorf("readyz warnings %q, want none", body.Warnings)
				}
				if strings.Contains(logs.String(), "--grpc.node-auth=none on") || strings.Contains(logs.String(), "enroll over plaintext") {
					t.Errorf("a loopback collector warned of its node auth:\n%s", logs.String())
				}
				return
			}
			if len(body.Warnings) != 1 || !strings.Contains(body.Warnings[0], tc.want) {
				t.Errorf("readyz warnings %q, want one saying %q", body.Warnings, tc.want)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), tc.want) {
				t.Errorf("the start-up log has no warning saying %q:\n%s", tc.want, logs.String())
			}
		})
	}
}

// lockedBuffer is a log destination the collector's goroutines share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
