// Package alertmanager posts alerts to Prometheus Alertmanager through its
// v2 API (POST /api/v2/alerts), the way Prometheus itself does: every alert
// carries startsAt and endsAt, firing alerts are re-posted at a steady
// cadence with endsAt a few resend intervals ahead (so an Alertmanager that
// stops hearing from us resolves them itself), and a resolve is a post with
// endsAt set to when it cleared. It also creates and expires silences
// (POST /api/v2/silences, DELETE /api/v2/silence/{id}) for on-call who
// silence an alert from NBS.
package alertmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
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

// Matcher is one of a silence's label matchers (equality only: NBS silences
// the exact label set of one alert).
type Matcher struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual bool   `json:"isEqual"`
}

// Silence is Alertmanager's postableSilence.
type Silence struct {
	ID        string    `json:"id,omitempty"`
	Matchers  []Matcher `json:"matchers"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	CreatedBy string    `json:"createdBy"`
	Comment   string    `json:"comment"`
}

// EqualMatchers matches exactly these labels, in a stable order.
func EqualMatchers(labels map[string]string) []Matcher {
	out := make([]Matcher, 0, len(labels))
	for k, v := range labels {
		out = append(out, Matcher{Name: k, Value: v, IsEqual: true})
	}
	slices.SortFunc(out, func(a, b Matcher) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// apiURL is an API path under an Alertmanager base URL.
func apiURL(base, path string) (string, error) {
	endpoint, err := Endpoint(base)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(endpoint, "/alerts") + path, nil
}

// CreateSilence posts a silence (POST /api/v2/silences) and returns its id.
func (c *Client) CreateSilence(ctx context.Context, base string, s Silence) (string, error) {
	endpoint, err := apiURL(base, "/silences")
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode silence: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("build request to %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("create silence at %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("create silence at %s: HTTP %d: %s", endpoint, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	if err := json.Unmarshal(msg, &out); err != nil || out.SilenceID == "" {
		return "", fmt.Errorf("create silence at %s: no silence id in %q", endpoint, msg)
	}
	return out.SilenceID, nil
}

// ExpireSilence expires a silence (DELETE /api/v2/silence/{id}). A silence
// Alertmanager no longer knows (it expired and was garbage-collected, or the
// Alertmanager lost its state) counts as expired.
func (c *Client) ExpireSilence(ctx context.Context, base, id string) error {
	endpoint, err := apiURL(base, "/silence/"+url.PathEscape(id))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, endpoint, nil)
	if err != nil {
		return fmt.Errorf("build request to %s: %w", endpoint, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("expire silence at %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("expire silence at %s: HTTP %d: %s", endpoint, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}
