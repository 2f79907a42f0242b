package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// A collector whose --db.read-url does not answer starts, and its series
// are read from --db.url instead (collector/store's replica test shows
// reads served by a real standby).
func TestReadURLThatDoesNotAnswerFallsBackToThePrimary(t *testing.T) {
	ctx := context.Background()
	dbURL := pgcluster.Database(t)
	st, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	node, err := st.UpsertNode(ctx, store.Node{Name: "n1", InstanceID: 1, IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []store.MetricDef{{Path: "drops", Title: "Drops", Kind: store.KindRate}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	if _, err := st.WriteReports(ctx, []store.Report{{NodeID: node, InstanceID: 1, Seq: 1, Time: t0, Received: t0, IntervalMS: 10000,
		Samples: []store.Sample{{Path: "drops", MetricID: ids["drops"], Value: 42}}}}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := l.Addr().String()
	l.Close()

	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DBURL = "127.0.0.1:0", "127.0.0.1:0", dbURL
	cfg.DBReadURL = "postgres://nbs@" + nobody + "/nbs?connect_timeout=2"
	cfg.Access.Mode = access.ModeNone
	c, stop := startCollector(t, cfg)
	defer stop()
	_, addr := c.Addrs()
	q := url.Values{"metric": {"drops"}, "from": {t0.Add(-time.Minute).UTC().Format(time.RFC3339)}, "to": {time.Now().UTC().Format(time.RFC3339)}}
	resp, err := http.Get(fmt.Sprintf("http://%s/api/v1/nodes/n1/series?%s", addr, q.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Points []struct {
			Count *float64 `json:"count"`
		} `json:"points"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("series: HTTP %d, %v", resp.StatusCode, err)
	}
	sum := 0.0
	for _, p := range body.Points {
		if p.Count != nil {
			sum += *p.Count
		}
	}
	if sum != 42 {
		t.Errorf("series read with the read database down: %+v, want the stored 42", body)
	}
}
