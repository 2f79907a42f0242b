package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The profiles are served until the collector's context ends, and then
// their listener is closed.
func TestPprofServesUntilStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addr, wait, err := servePprof(ctx, "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range []struct{ path, want string }{
		{"/debug/pprof/goroutine?debug=1", "goroutine profile: total"},
		{"/debug/pprof/heap?debug=1", "heap profile:"},
	} {
		resp, err := client.Get("http://" + addr.String() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d, %q…, %v; want 200 with %q", tc.path, resp.StatusCode, string(body[:min(len(body), 80)]), err, tc.want)
		}
	}
	cancel()
	wait()
	if c, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		c.Close()
		t.Error("the pprof listener still accepts after the collector stopped")
	}
}
