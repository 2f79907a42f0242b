package api_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
)

// TestEventCounterparts: each event with endpoints is looked up once, on the
// collector's clock (web-1's runs 3 s ahead, the peers' are unknown: 0),
// and a candidate counts only within 2 s of it once its own clock is
// corrected; a loopback flow is never looked up (every host has one).
func TestEventCounterparts(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	st := newFakeStore(now)
	router, _ := server(t, st)
	to := now.Add(-time.Minute)
	ev := to.Add(-3 * time.Minute) // the syn_sent event of the fake's Events
	onCollector := ev.Add(-3 * time.Second)
	cp := func(node string, at time.Time, metric, reason string) fakeOther {
		return fakeOther{labels: map[string]string{"customer": "acme"}, Counterpart: store.Counterpart{Node: node,
			StoredEvent: store.StoredEvent{Time: at, Metric: metric,
				Fields: map[string]string{"src": "10.1.0.2:443", "dst": "10.1.0.1:5000", "reason": reason}}}}
	}
	st.others = []fakeOther{
		cp("db-1", onCollector.Add(500*time.Millisecond), "tcp_reset/sent/no_socket", "no_socket"),
		// As stamped, at the very time of web-1's event; corrected for
		// web-1's clock, 3 s away: another exchange.
		cp("db-2", ev, "tcp_reset/sent/tcp_state", "tcp_state"),
	}
	w := do(t, router, "GET", api.Prefix+"/nodes/web-1/events?metric=tcp_reset&to="+strconv.FormatInt(to.UnixMilli(), 10), "")
	if w.Code != 200 {
		t.Fatalf("events: HTTP %d %s", w.Code, w.Body)
	}
	var got api.EventList
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(st.asked.probes) != 1 || st.asked.except != 2 {
		t.Fatalf("store asked %+v except node %d; want one probe (the loopback flow is not one), except web-1 (2)", st.asked.probes, st.asked.except)
	}
	p := st.asked.probes[0]
	if p.Src != "10.1.0.2:443" || p.Dst != "10.1.0.1:5000" || p.Protocol != "tcp" || !p.Near.Equal(onCollector) {
		t.Errorf("probe %+v: want 10.1.0.2:443 -> 10.1.0.1:5000, tcp, near %v", p, onCollector)
	}
	if len(got.Events) != 4 {
		t.Fatalf("%d events, want 4", len(got.Events))
	}
	for i, e := range got.Events {
		want := 0
		if i == 2 {
			want = 1
		}
		if e.Counterparts == nil || len(e.Counterparts) != want {
			t.Errorf("event %d (%v) has counterparts %+v, want %d", i, e.Fields, e.Counterparts, want)
		}
	}
	if c := got.Events[2].Counterparts; len(c) == 1 && (c[0].Node != "db-1" || c[0].Fields["reason"] != "no_socket" || c[0].Metric != "tcp_reset/sent/no_socket") {
		t.Errorf("counterpart %+v: want db-1's no_socket", c[0])
	}
}
