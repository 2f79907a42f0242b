package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func TestAlertVerify(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	body := []byte(`{"status":"firing"}`)
	now := time.Unix(1_800_000_000, 0)
	good := Sign(secret, now, body)
	ts := strconv.FormatInt(now.Unix(), 10)
	cases := []struct {
		name    string
		secret  []byte
		sig, ts string
		body    []byte
		at      time.Time
		wantErr error
	}{
		{"valid", secret, good, ts, body, now, nil},
		{"valid within tolerance", secret, good, ts, body, now.Add(4 * time.Minute), nil},
		{"tampered body", secret, good, ts, []byte(`{"status":"resolved"}`), now, ErrBadSignature},
		{"wrong secret", []byte("another secret of 20"), good, ts, body, now, ErrBadSignature},
		{"timestamp swapped (replay with a fresh time)", secret, good, strconv.FormatInt(now.Unix()+60, 10), body, now, ErrBadSignature},
		{"replayed later", secret, good, ts, body, now.Add(10 * time.Minute), ErrStale},
		{"from the future", secret, good, ts, body, now.Add(-10 * time.Minute), ErrStale},
		{"no prefix", secret, good[len("sha256="):], ts, body, now, ErrBadSignature},
		{"not hex", secret, "sha256=zz", ts, body, now, ErrBadSignature},
		{"bad timestamp", secret, good, "yesterday", body, now, ErrStale},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Verify(c.secret, c.sig, c.ts, c.body, c.at, 5*time.Minute)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, c.wantErr)
			}
		})
	}
}

func TestAlertSendSignsEveryAttempt(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	var got []error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := Verify(secret, r.Header.Get(SignatureHeader), r.Header.Get(TimestampHeader), body, time.Now(), time.Minute)
		got = append(got, err)
		if r.Header.Get(DeliveryHeader) != "7-firing" || r.Header.Get(EventHeader) != "firing" {
			t.Errorf("headers %v", r.Header)
		}
		if len(got) == 1 {
			http.Error(w, "try later", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c := New(srv.Client(), secret)
	body := []byte(`{"delivery":"7-firing"}`)
	if err := c.Send(context.Background(), srv.URL, "7-firing", "firing", body); err == nil {
		t.Fatal("first attempt: want the 503 as an error")
	}
	if err := c.Send(context.Background(), srv.URL, "7-firing", "firing", body); err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	for i, err := range got {
		if err != nil {
			t.Errorf("attempt %d: receiver could not verify: %v", i+1, err)
		}
	}
}
