// Package alertmanager posts alerts to Prometheus Alertmanager through its
// v2 API (POST /api/v2/alerts), the way Prometheus itself does: every alert
// carries startsAt and endsAt, firing alerts are re-posted at a steady
// cadence with endsAt a few resend intervals ahead (so an Alertmanager that
// stops hearing from us resolves them itself), and a resolve is a post with
// endsAt set to when it cleared.
package alertmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Alert is Alertmanager's postableAlert.
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt,omitzero"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// Client posts to one or more Alertmanagers.
type Client struct {
	http *http.Client
}

// New returns a client; hc nil means a client with a 10 s timeout.
func New(hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{http: hc}
}

// Endpoint is the alerts endpoint under an Alertmanager base URL, which may
// carry a path prefix (an Alertmanager behind a reverse proxy).
func Endpoint(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parse alertmanager url %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("alertmanager url %q must be an absolute http(s) URL such as http://alertmanager:9093", base)
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/api/v2/alerts"
	return u.String(), nil
}

// Post sends alerts to the Alertmanager at base. A 2xx answer means it
// accepted all of them.
func (c *Client) Post(ctx context.Context, base string, alerts []Alert) error {
	endpoint, err := Endpoint(base)
	if err != nil {
		return err
	}
	body, err := json.Marshal(alerts)
	if err != nil {
		return fmt.Errorf("encode alerts: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request to %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("post alerts to %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post alerts to %s: HTTP %d: %s", endpoint, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}
