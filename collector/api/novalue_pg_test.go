package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// A ping root whose every echo was lost has no value, and history keeps
// it so: the series API's steps of those minutes have no value (the chart
// draws a gap) but their CRIT state, and a tree as of one of them shows the
// root without a value ("—"), never 0 ms.
func TestPingAllLostHasNoValueInHistory(t *testing.T) {
	ctx := context.Background()
	doc := loadDoc(t)
	st := storetest.Open(t)
	id, err := st.UpsertNode(ctx, store.Node{Name: "web-1", IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{{Path: "ping", Title: "Ping", Unit: "ms", Kind: store.KindGauge}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	start := now.Add(-30 * time.Minute).Truncate(time.Minute)
	lostFrom, lostTo := start.Add(10*time.Minute), start.Add(15*time.Minute)
	lost := func(ts time.Time) bool { return !ts.Before(lostFrom) && ts.Before(lostTo) }
	var reports []store.Report
	for i, ts := 0, start; ts.Before(now.Add(-time.Minute)); i, ts = i+1, ts.Add(10*time.Second) {
		smp := store.Sample{MetricID: ids["ping"], Path: "ping", Value: 0.4, State: store.StateOK}
		if lost(ts) {
			smp = store.Sample{MetricID: ids["ping"], Path: "ping", State: store.StateCrit, NoValue: true}
		}
		reports = append(reports, store.Report{NodeID: id, InstanceID: 1, Seq: uint64(i + 1), Time: ts, IntervalMS: 10000, Samples: []store.Sample{smp}})
	}
	if _, err := st.WriteReports(ctx, reports); err != nil {
		t.Fatal(err)
	}
	router, _ := server(t, st)

	for _, step := range []string{"1m", "10s"} {
		q := url.Values{"metric": {"ping"}, "from": {fmt.Sprint(start.UnixMilli())}, "step": {step}}
		target := api.Prefix + "/nodes/web-1/series?" + q.Encode()
		w := do(t, router, "GET", target, "")
		if w.Code != 200 {
			t.Fatalf("%s: HTTP %d %s", target, w.Code, w.Body)
		}
		if err := doc.CheckResponse("GET", "/nodes/{node}/series", w.Code, w.Body.Bytes()); err != nil {
			t.Error(err)
		}
		var s api.Series
		if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		var gaps, values int
		for _, p := range s.Points {
			switch {
			case lost(p.Time) && p.Value == nil && p.State == "crit":
				gaps++
			case !lost(p.Time) && p.Value != nil && near(*p.Value, 0.4) && p.State == "ok":
				values++
			default:
				t.Errorf("step %s: ping at %v: value %v state %s (every echo lost: %v)", step, p.Time, p.Value, p.State, lost(p.Time))
			}
		}
		if gaps == 0 || values == 0 {
			t.Errorf("step %s: %d steps without a value, %d with; want both", step, gaps, values)
		}
	}

	for _, c := range []struct {
		name string
		at   time.Time
		want *float64
		st   string
	}{
		{"as of a minute every echo was lost", lostFrom.Add(2*time.Minute + 30*time.Second), nil, "crit"},
		{"as of a minute answered", lostTo.Add(2*time.Minute + 30*time.Second), ptr(0.4), "ok"},
	} {
		target := api.Prefix + "/nodes/web-1/tree?at=" + fmt.Sprint(c.at.UnixMilli())
		w := do(t, router, "GET", target, "")
		if w.Code != 200 {
			t.Fatalf("%s: HTTP %d %s", target, w.Code, w.Body)
		}
		var tr api.Tree
		if err := json.Unmarshal(w.Body.Bytes(), &tr); err != nil {
			t.Fatal(err)
		}
		r := findNode(tr.Roots, "ping")
		if r == nil {
			t.Fatalf("%s: no ping root in %s", c.name, w.Body)
		}
		if (r.Value == nil) != (c.want == nil) || (c.want != nil && !near(*r.Value, *c.want)) || r.State != c.st {
			t.Errorf("%s: ping value %v state %s; want %v %s", c.name, r.Value, r.State, c.want, c.st)
		}
	}
}

func ptr(v float64) *float64 { return &v }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
