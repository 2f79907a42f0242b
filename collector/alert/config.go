package alert

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/alert/notify/alertmanager"
)

// Config is the alerting part of the collector's configuration.
type Config struct {
	// AlertmanagerURLs are the Alertmanagers to post to: all of them, as
	// an Alertmanager HA cluster expects from its clients.
	AlertmanagerURLs URLList
	WebhookURL       string
	// WebhookSecretFile holds the HMAC key; a file, not a flag value, so
	// the secret stays out of process listings.
	WebhookSecretFile string
	// ResendInterval is how often firing alerts are posted again;
	// Alertmanager treats an alert as resolved when it stops hearing of it
	// for its endsAt, which is set to resendFactor intervals ahead.
	ResendInterval time.Duration
	// ExternalURL is where people reach this NBS, for links in alerts.
	// The app sets it from --web.external-url.
	ExternalURL string
	// LeaderRetry is how often a collector that is not evaluating tries to
	// take the lead; it bounds failover time after the leader dies.
	LeaderRetry time.Duration
	// Lookback caps how far back a new leader replays stored reports.
	Lookback time.Duration
}

// DefaultConfig is the alerting configuration unless flags or tests say
// otherwise: no targets, so nothing is delivered until one is configured.
func DefaultConfig() Config {
	return Config{ResendInterval: time.Minute, LeaderRetry: 2 * time.Second, Lookback: 10 * time.Minute}
}

// URLList is a flag.Value collecting URLs from repeated flags or commas.
type URLList []string

func (l *URLList) String() string { return strings.Join(*l, ",") }

func (l *URLList) Set(v string) error {
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			*l = append(*l, u)
		}
	}
	return nil
}

// RegisterFlags binds the alerting flags, with the values already in c
// (DefaultConfig's, usually) as their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.AlertmanagerURLs, "alertmanager.url", "Alertmanager base URL to send alerts to, e.g. http://alertmanager:9093 (repeat the flag or separate with commas for an HA pair)")
	fs.StringVar(&c.WebhookURL, "alert.webhook-url", c.WebhookURL, "URL that receives every alert firing and resolving as signed JSON (optional)")
	fs.StringVar(&c.WebhookSecretFile, "alert.webhook-secret-file", c.WebhookSecretFile, "file holding the HMAC-SHA256 key that signs webhook requests (required with --alert.webhook-url)")
	fs.DurationVar(&c.ResendInterval, "alert.resend-interval", c.ResendInterval, "how often firing alerts are re-sent to Alertmanager (Prometheus's default is 1m)")
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	for _, u := range c.AlertmanagerURLs {
		if _, err := alertmanager.Endpoint(u); err != nil {
			errs = append(errs, fmt.Errorf("--alertmanager.url: %w", err))
		}
	}
	if c.WebhookURL != "" {
		if u, err := url.Parse(c.WebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--alert.webhook-url %q must be an absolute http(s) URL", c.WebhookURL))
		}
		if c.WebhookSecretFile == "" {
			errs = append(errs, errors.New("--alert.webhook-secret-file is required with --alert.webhook-url: unsigned alerts could be forged"))
		}
	}
	if c.ResendInterval < time.Second || c.ResendInterval > time.Hour {
		errs = append(errs, fmt.Errorf("--alert.resend-interval %s must be from 1s to 1h", c.ResendInterval))
	}
	if c.LeaderRetry < 10*time.Millisecond || c.LeaderRetry > time.Minute {
		errs = append(errs, fmt.Errorf("alert leader retry %s must be from 10ms to 1m", c.LeaderRetry))
	}
	if c.Lookback < time.Minute || c.Lookback > 24*time.Hour {
		errs = append(errs, fmt.Errorf("alert lookback %s must be from 1m to 24h", c.Lookback))
	}
	if err := ValidateExternalURL(c.ExternalURL); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// readSecret loads the webhook key; surrounding whitespace (a trailing
// newline from `echo`) is not part of it.
func readSecret(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read webhook secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return nil, fmt.Errorf("webhook secret in %s is %d bytes; use at least 16 (e.g. openssl rand -hex 32)", file, len(s))
	}
	return []byte(s), nil
}

// DefaultExternalURL is the link base when --web.external-url is not given:
// the HTTP listener's address, with the host name in place of a wildcard
// address that nobody could open.
func DefaultExternalURL(httpAddr string) string {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "http://" + httpAddr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		} else {
			host = "localhost"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// ValidateExternalURL checks --web.external-url.
func ValidateExternalURL(s string) error {
	if s == "" {
		return nil
	}
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--web.external-url %q must be an absolute http(s) URL such as https://nbs.example.com", s)
	}
	return nil
}
