// Package webhook delivers alert notifications as JSON to any HTTP endpoint,
// signed so the receiver can tell they come from this NBS and are fresh.
//
// Every request carries:
//
//	X-NBS-Timestamp: <Unix seconds when it was sent>
//	X-NBS-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//	X-NBS-Delivery:  <idempotency key, the same for every retry of one notification>
//	X-NBS-Event:     firing | resolved
//
// A receiver recomputes the HMAC over the timestamp and the raw body with
// the shared secret, compares in constant time (Verify does both), rejects
// timestamps outside a few minutes (so a captured request cannot be
// replayed later) and drops a delivery key it has already processed (so a
// retry after a lost answer is not acted on twice).
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	SignatureHeader = "X-NBS-Signature"
	TimestampHeader = "X-NBS-Timestamp"
	DeliveryHeader  = "X-NBS-Delivery"
	EventHeader     = "X-NBS-Event"

	signaturePrefix = "sha256="
)

// Sign returns the X-NBS-Signature value for a body sent at ts.
func Sign(secret []byte, ts time.Time, body []byte) string {
	return signaturePrefix + hex.EncodeToString(mac(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

var (
	ErrBadSignature = errors.New("signature does not match")
	ErrStale        = errors.New("timestamp outside the allowed window")
)

// Verify checks a request's signature and timestamp headers against the raw
// body; tolerance bounds how far the timestamp may be from now.
func Verify(secret []byte, signature, timestamp string, body []byte, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q is not Unix seconds: %w", TimestampHeader, timestamp, ErrStale)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%s is %s away from now: %w", TimestampHeader, d.Round(time.Second), ErrStale)
	}
	hexSum, ok := strings.CutPrefix(signature, signaturePrefix)
	if !ok {
		return fmt.Errorf("%s must start with %s: %w", SignatureHeader, signaturePrefix, ErrBadSignature)
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return fmt.Errorf("%s is not hex: %w", SignatureHeader, ErrBadSignature)
	}
	if !hmac.Equal(got, mac(secret, timestamp, body)) {
		return ErrBadSignature
	}
	return nil
}

// Client sends signed notifications.
type Client struct {
	http   *http.Client
	secret []byte
	now    func() time.Time
}

// New returns a client signing with secret; hc nil means a 10 s timeout.
func New(hc *http.Client, secret []byte) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{http: hc, secret: secret, now: time.Now}
}

// Send makes one delivery attempt; the caller owns retries. The body is
// signed afresh with the current time on every attempt, so a retry is
// never rejected as stale.
func (c *Client) Send(ctx context.Context, url, delivery, event string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request to %s: %w", url, err)
	}
	ts := c.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "nbs-collector")
	req.Header.Set(TimestampHeader, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(SignatureHeader, Sign(c.secret, ts, body))
	req.Header.Set(DeliveryHeader, delivery)
	req.Header.Set(EventHeader, event)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("post webhook %s: %w", url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post webhook %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Message is the JSON body of every webhook request.
type Message struct {
	Version string `json:"version"` // "1"
	// Delivery is the idempotency key, also in X-NBS-Delivery.
	Delivery string `json:"delivery"`
	Status   string `json:"status"` // firing or resolved
	Alert    Alert  `json:"alert"`
}

// Alert is one alert as the webhook carries it.
type Alert struct {
	ID          int64             `json:"id"`
	Fingerprint string            `json:"fingerprint"`
	Rule        string            `json:"rule"`
	Severity    string            `json:"severity"`
	Node        string            `json:"node,omitempty"`
	Root        string            `json:"root,omitempty"`
	Metric      string            `json:"metric,omitempty"` // the descendant that explains the alert
	Group       map[string]string `json:"group,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Value       *float64          `json:"value,omitempty"`
	StartsAt    time.Time         `json:"starts_at"`
	EndsAt      *time.Time        `json:"ends_at"`
	TreeURL     string            `json:"tree_url,omitempty"`
}
