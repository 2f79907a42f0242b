package alert

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/testlab/configtest"
)

func TestAlertWakePayloadsRoundTrip(t *testing.T) {
	ids := make([]int32, 3000)
	for i := range ids {
		ids[i] = int32(1_000_000 + i)
	}
	var back []int32
	payloads := wakePayloads(ids)
	if len(payloads) < 2 {
		t.Fatalf("%d payloads for 3000 ids; want them split under the NOTIFY limit", len(payloads))
	}
	for _, p := range payloads {
		if len(p) > maxPayload {
			t.Errorf("payload of %d bytes, limit %d", len(p), maxPayload)
		}
		got, all := parseWake(p)
		if all {
			t.Fatalf("payload %q parsed as a full sweep", p[:20])
		}
		back = append(back, got...)
	}
	if !reflect.DeepEqual(back, ids) {
		t.Errorf("ids did not survive the round trip")
	}
	if _, all := parseWake("*"); !all {
		t.Error(`"*" must mean every node`)
	}
	if _, all := parseWake("1,x"); !all {
		t.Error("an unreadable payload must fall back to a full sweep")
	}
}

func TestAlertFmtNum(t *testing.T) {
	for v, want := range map[float64]string{187.6: "188", 200: "200", 10: "10", 2.5: "2.5", 2.25: "2.25", 0.01234: "0.0123", 0: "0"} {
		if got := fmtNum(v); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestAlertDefaultExternalURL(t *testing.T) {
	cases := map[string]string{"127.0.0.1:7700": "http://127.0.0.1:7700", "[::1]:7700": "http://[::1]:7700"}
	for addr, want := range cases {
		if got := DefaultExternalURL(addr); got != want {
			t.Errorf("DefaultExternalURL(%q) = %q, want %q", addr, got, want)
		}
	}
	for _, addr := range []string{":7700", "0.0.0.0:7700", "[::]:7700"} {
		if got := DefaultExternalURL(addr); strings.Contains(got, "0.0.0.0") || strings.Contains(got, "[::]") || strings.HasPrefix(got, "http://:") {
			t.Errorf("DefaultExternalURL(%q) = %q: a wildcard address nobody can open", addr, got)
		}
	}
}

func TestAlertConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Config)
		want []string // every problem, reported at once; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"HA pair", func(c *Config) { c.AlertmanagerURLs = URLList{"http://am:9093", "http://am2:9093"} }, nil},
		{"signed webhook", func(c *Config) { c.WebhookURL, c.WebhookSecretFile = "https://hooks.example.com/nbs", "/s" }, nil},
		{"alertmanager URL", func(c *Config) { c.AlertmanagerURLs = URLList{"am:9093"} }, []string{"--alertmanager.url"}},
		{"unsigned webhook", func(c *Config) { c.WebhookURL = "https://hooks.example.com/nbs" }, []string{"--alert.webhook-secret-file is required"}},
		{"webhook URL", func(c *Config) { c.WebhookURL, c.WebhookSecretFile = "hooks", "/s" }, []string{"--alert.webhook-url \"hooks\""}},
		{"resend", func(c *Config) { c.ResendInterval = 1 }, []string{"--alert.resend-interval"}},
		{"resend unset", func(c *Config) { c.ResendInterval = 0 }, []string{"--alert.resend-interval"}},
		{"leader retry", func(c *Config) { c.LeaderRetry = 0 }, []string{"alert leader retry"}},
		{"lookback", func(c *Config) { c.Lookback = 48 * time.Hour }, []string{"alert lookback"}},
		{"external URL", func(c *Config) { c.ExternalURL = "nbs" }, []string{"--web.external-url"}},
		{"everything at once", func(c *Config) {
			*c = Config{AlertmanagerURLs: URLList{"am:9093", "http://ok:9093", "ftp://x"}, WebhookURL: "hooks"}
		},
			[]string{"--alertmanager.url", "--alertmanager.url", "--alert.webhook-url", "--alert.webhook-secret-file", "--alert.resend-interval",
				"alert leader retry", "alert lookback"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mut(&c)
			configtest.Problems(t, c.Validate(), tc.want...)
		})
	}
	var l URLList
	l.Set("http://a:9093, http://b:9093")
	l.Set("http://c:9093")
	if len(l) != 3 || l[1] != "http://b:9093" {
		t.Errorf("URLList = %v, want three URLs from comma-separated and repeated flags", l)
	}
}
