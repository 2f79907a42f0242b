package alertmanager

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAlertEndpoint(t *testing.T) {
	cases := []struct{ base, want, err string }{
		{"http://am:9093", "http://am:9093/api/v2/alerts", ""},
		{"http://am:9093/", "http://am:9093/api/v2/alerts", ""},
		{"https://ops.example.com/alertmanager", "https://ops.example.com/alertmanager/api/v2/alerts", ""},
		{"am:9093", "", "absolute http(s) URL"},
		{"ftp://am", "", "absolute http(s) URL"},
	}
	for _, c := range cases {
		got, err := Endpoint(c.base)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Endpoint(%q) = %q, %v; want error %q", c.base, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Endpoint(%q) = %q, %v; want %q", c.base, got, err, c.want)
		}
	}
}

func TestAlertPost(t *testing.T) {
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v2/alerts" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		if len(got) == 2 {
			http.Error(w, `{"code":400,"message":"bad alert"}`, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	c := New(srv.Client())
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	a := Alert{Labels: map[string]string{"alertname": "X", "node": "n1"}, Annotations: map[string]string{"summary": "s"},
		StartsAt: start, GeneratorURL: "http://nbs/nodes/n1?metric=tcp_reset"}
	if err := c.Post(context.Background(), srv.URL, []Alert{a}); err != nil {
		t.Fatal(err)
	}
	if _, has := got[0]["endsAt"]; has || got[0]["startsAt"] != "2026-11-21T10:00:00Z" || got[0]["generatorURL"] == nil {
		t.Errorf("posted %v: want startsAt, generatorURL and no endsAt for a zero time", got[0])
	}
	if err := c.Post(context.Background(), srv.URL, []Alert{a, a}); err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "bad alert") {
		t.Errorf("rejected post: err %v, want HTTP 400 with Alertmanager's message", err)
	}
}
