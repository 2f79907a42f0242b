package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// The labels the default rule's alert for lab-b's reset storm must carry.
var stormLabels = map[string]string{
	"alertname": "NBSRootCritical", "severity": "critical", "node": "lab-b",
	"root": "tcp_reset", "metric": "tcp_reset/sent/no_socket", "customer": "acme",
}

// A real reset storm in the lab pages through a real Alertmanager within
// two intervals with the right labels, and through the signed webhook;
// the collector restarts mid-alert without a duplicate notification; when
// the storm stops the resolve reaches Alertmanager, its receiver and the
// webhook.
func TestAlertResetStormThroughAlertmanager(t *testing.T) {
	snk := newSink(t)
	am := startAlertmanager(t, snk.srv.URL+"/am", time.Second)
	lab := netlab.New(t)
	db := pgcluster.Database(t)
	addr := freeAddr(t)
	cfg := snk.alertConfig(t, am)
	col := startAlertCollector(t, db, addr, cfg)
	startAgent(t, "lab-b", lab.B, addr, func(c *agentapp.Config) { c.Labels = agentapp.Labels{"customer": "acme"} })
	waitNode(t, col, "lab-b")

	// Breach → Alertmanager's API within two intervals (plus slack).
	took := storm(t, lab, withinTwoIntervals, func() string {
		if got := activeAlerts(t, am, stormLabels); len(got) != 1 {
			return fmt.Sprintf("alertmanager holds %d alerts labelled %v", len(got), stormLabels)
		}
		return ""
	})
	t.Logf("reset storm to alert in Alertmanager's API: %s", took.Round(time.Millisecond))
	a := activeAlerts(t, am, stormLabels)[0]
	for _, k := range []string{"summary", "description", "tree_url"} {
		if a.Annotations[k] == "" {
			t.Errorf("alertmanager alert lacks annotation %s: %v", k, a.Annotations)
		}
	}
	// The link opens the tree at the explaining metric over the breach window.
	if want := "/nodes/lab-b?metric=tcp_reset%2Fsent%2Fno_socket&from="; !strings.Contains(a.Annotations["tree_url"], want) || !strings.Contains(a.Annotations["tree_url"], "&to=") {
		t.Errorf("tree_url %q, want %q…&to=…", a.Annotations["tree_url"], want)
	}
	if !strings.HasSuffix(a.Annotations["threshold"], " resets/s") {
		t.Errorf("threshold annotation %q is not in the metric's unit", a.Annotations["threshold"])
	}
	if !strings.Contains(a.Annotations["description"], "crit 10 resets/s") {
		t.Errorf("description %q does not quote the threshold", a.Annotations["description"])
	}

	// The receivers hear of it: Alertmanager after group_wait, the webhook
	// directly, signed.
	storm(t, lab, 10*time.Second, func() string {
		if n, _ := snk.amNotified("firing", stormLabels); n != 1 {
			return fmt.Sprintf("%d firing notifications from alertmanager:%s", n, snk.dump())
		}
		if n, _, _ := snk.nbsNotified("firing", "lab-b", "tcp_reset"); n != 1 {
			return fmt.Sprintf("%d firing webhook messages:%s", n, snk.dump())
		}
		return ""
	})
	_, _, msg := snk.nbsNotified("firing", "lab-b", "tcp_reset")
	if msg.Alert.Rule != "NBSRootCritical" || msg.Alert.Root != "tcp_reset" || msg.Alert.Metric != "tcp_reset/sent/no_socket" ||
		msg.Alert.Value == nil || *msg.Alert.Value < 10 || msg.Alert.Labels["customer"] != "acme" {
		t.Errorf("webhook message %+v", msg)
	}

	// Restart the collector while the storm goes on.
	col.stop()
	stormFor(t, lab, 2*interval)
	col = startAlertCollector(t, db, addr, cfg)
	stormFor(t, lab, 4*interval)
	if got := activeAlerts(t, am, stormLabels); len(got) != 1 {
		t.Errorf("after the restart alertmanager holds %d matching alerts, want 1", len(got))
	}

	// Stop the storm: resolved everywhere.
	stopped := time.Now()
	eventually(t, withinTwoIntervals+2*time.Second, func() string {
		if got := activeAlerts(t, am, stormLabels); len(got) != 0 {
			return "alertmanager still holds the alert as firing"
		}
		if n, _ := snk.amNotified("resolved", stormLabels); n != 1 {
			return fmt.Sprintf("%d resolved notifications from alertmanager:%s", n, snk.dump())
		}
		if n, _, _ := snk.nbsNotified("resolved", "lab-b", "tcp_reset"); n != 1 {
			return fmt.Sprintf("%d resolved webhook messages:%s", n, snk.dump())
		}
		return ""
	})
	t.Logf("storm stopped to resolve notified: %s", time.Since(stopped).Round(time.Millisecond))

	// Nothing twice, even after more group intervals.
	time.Sleep(3 * time.Second)
	for _, status := range []string{"firing", "resolved"} {
		if n, _ := snk.amNotified(status, stormLabels); n != 1 {
			t.Errorf("alertmanager sent %d %s notifications, want exactly 1:%s", n, status, snk.dump())
		}
		if n, _, _ := snk.nbsNotified(status, "lab-b", "tcp_reset"); n != 1 {
			t.Errorf("webhook got %d %s messages, want exactly 1:%s", n, status, snk.dump())
		}
	}
	if errs := snk.signatureErrors(); len(errs) > 0 {
		t.Errorf("webhook signature checks failed: %v", errs)
	}

	// The collector's own API keeps the history, linked to the tree.
	got := getAlerts(t, col)
	var found bool
	for _, al := range got.Alerts {
		if al.Node == "lab-b" && al.Rule == "NBSRootCritical" && al.Root == "tcp_reset" {
			found = true
			if al.State != "resolved" || al.StartsAt == nil || al.EndsAt == nil || al.Child != "tcp_reset/sent/no_socket" ||
				!strings.Contains(al.TreeURL, "/nodes/lab-b?metric=") {
				t.Errorf("api alert %+v: want resolved, with times, child and tree link", al)
			}
			var detail struct {
				Deliveries []struct {
					Target, Event, Status string
				} `json:"deliveries"`
			}
			col.getJSON(t, fmt.Sprintf("/api/v1/alerts/%d", al.ID), &detail)
			var log []string
			for _, d := range detail.Deliveries {
				log = append(log, d.Target+"/"+d.Event+"/"+d.Status)
			}
			sort.Strings(log)
			want := []string{"alertmanager/firing/delivered", "alertmanager/resolved/delivered", "webhook/firing/delivered", "webhook/resolved/delivered"}
			if !slices.Equal(log, want) {
				t.Errorf("delivery log %v, want %v", log, want)
			}
		}
	}
	if !found {
		t.Errorf("GET /api/v1/alerts has no tcp_reset alert for lab-b: %+v", got.Alerts)
	}
}

// Two collectors behind one address space: the agent streams to the one
// that does not evaluate; the alert still fires exactly once, and when the
// evaluating collector dies the other takes over and resolves it.
func TestAlertsTwoCollectorsFireOnce(t *testing.T) {
	snk := newSink(t)
	am := startAlertmanager(t, snk.srv.URL+"/am", time.Second)
	lab := netlab.New(t)
	db := pgcluster.Database(t)
	cfg := snk.alertConfig(t, am)
	leader := startAlertCollector(t, db, "127.0.0.1:0", cfg)
	eventually(t, 5*time.Second, func() string {
		if h := getAlerts(t, leader).Evaluator.Holder; !strings.HasSuffix(h, leader.httpAddr) {
			return fmt.Sprintf("evaluator is %q, want the first collector", h)
		}
		return ""
	})
	other := startAlertCollector(t, db, "127.0.0.1:0", cfg)
	startAgent(t, "lab-b", lab.B, other.grpcAddr, func(c *agentapp.Config) { c.Labels = agentapp.Labels{"customer": "acme"} })
	waitNode(t, other, "lab-b")

	took := storm(t, lab, withinTwoIntervals, func() string {
		if n, _, _ := snk.nbsNotified("firing", "lab-b", "tcp_reset"); n != 1 {
			return fmt.Sprintf("%d firing webhook messages:%s", n, snk.dump())
		}
		return ""
	})
	t.Logf("storm to webhook through the follower: %s", took.Round(time.Millisecond))
	if h := getAlerts(t, other).Evaluator.Holder; !strings.HasSuffix(h, leader.httpAddr) {
		t.Errorf("evaluator is %q; the alert should have come from the first collector", h)
	}

	// Delivery is at least once: a leader stopped between a receiver's
	// answer and the commit of its delivery sends it again under the same
	// delivery id. What this test holds to exactly once is the firing
	// itself, so the leader stops once its deliveries are recorded.
	eventually(t, 10*time.Second, func() string {
		for _, a := range getAlerts(t, other).Alerts {
			var one struct {
				Deliveries []struct {
					Target string `json:"target"`
					Event  string `json:"event"`
					Status string `json:"status"`
				} `json:"deliveries"`
			}
			other.getJSON(t, fmt.Sprintf("/api/v1/alerts/%d", a.ID), &one)
			for _, d := range one.Deliveries {
				if d.Status != "delivered" {
					return fmt.Sprintf("alert %d's %s delivery to %s is %s", a.ID, d.Event, d.Target, d.Status)
				}
			}
		}
		return ""
	})
	leader.stop()
	eventually(t, 5*time.Second, func() string {
		if h := getAlerts(t, other).Evaluator.Holder; !strings.HasSuffix(h, other.httpAddr) {
			return fmt.Sprintf("evaluator is %q, want the second collector to take over", h)
		}
		return ""
	})
	stormFor(t, lab, 2*interval)
	eventually(t, withinTwoIntervals+2*time.Second, func() string {
		if n, _, _ := snk.nbsNotified("resolved", "lab-b", "tcp_reset"); n != 1 {
			return fmt.Sprintf("%d resolved webhook messages:%s", n, snk.dump())
		}
		if n, _ := snk.amNotified("resolved", stormLabels); n != 1 {
			return fmt.Sprintf("%d resolved notifications from alertmanager:%s", n, snk.dump())
		}
		return ""
	})
	time.Sleep(2 * time.Second)
	for _, status := range []string{"firing", "resolved"} {
		if n, _ := snk.amNotified(status, stormLabels); n != 1 {
			t.Errorf("alertmanager sent %d %s notifications, want exactly 1:%s", n, status, snk.dump())
		}
		if n, _, _ := snk.nbsNotified(status, "lab-b", "tcp_reset"); n != 1 {
			t.Errorf("webhook got %d %s messages, want exactly 1:%s", n, status, snk.dump())
		}
	}
	if errs := snk.signatureErrors(); len(errs) > 0 {
		t.Errorf("webhook signature checks failed: %v", errs)
	}
}

// Invalid rules are refused with the reason; a valid one is stored.
func TestAlertRulesAPIValidates(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	post := func(body string) (int, string) {
		code, b := col.call(t, http.MethodPost, "/api/v1/alert-rules", body)
		return code, string(b)
	}
	for _, c := range []struct{ body, want string }{
		{`{"name":"Bad Name","state":"crit","for_intervals":2,"severity":"critical"}`, "name"},
		{`{"name":"X","metric":"Tcp Reset","state":"crit","for_intervals":2,"severity":"critical"}`, "metric"},
		{`{"name":"X","kind":"group","state":"warn","for_seconds":30,"severity":"warning"}`, "min_nodes"},
		{`{"name":"NBSRootCritical","state":"crit","for_intervals":2,"severity":"critical"}`, "exists already"},
	} {
		code, body := post(c.body)
		if (code != http.StatusBadRequest && code != http.StatusConflict) || !strings.Contains(body, c.want) {
			t.Errorf("POST %s: HTTP %d %s; want 400/409 mentioning %q", c.body, code, body, c.want)
		}
	}
	if code, body := post(`{"name":"AcmeWarn","kind":"group","state":"warn","for_seconds":30,"severity":"warning","selector":{"customer":"acme"},"min_percent":25,"group_by":["rack"]}`); code != http.StatusCreated {
		t.Errorf("POST valid group rule: HTTP %d %s", code, body)
	}
}

// BenchmarkAlertLatency measures breach-to-notification latency: from the
// first reset of a storm (the kernel event) to the signed webhook's receipt,
// to Alertmanager's receipt (its own updatedAt) and to Alertmanager's
// notification (group_wait 0s), plus the collector's share: from the time
// of the report that fired the alert to the webhook's receipt. Report
// interval 1s. Run with a fixed count, e.g.
//
//	NBS_REQUIRE_BPF=1 go test ./e2e -run '^$' -bench AlertLatency -benchtime 40x -timeout 30m
func BenchmarkAlertLatency(b *testing.B) {
	b.Run("default_rule_crit_2_intervals", func(b *testing.B) { benchAlertLatency(b, 0) })
	b.Run("rule_crit_1_interval", func(b *testing.B) { benchAlertLatency(b, 1) })
}

func benchAlertLatency(b *testing.B, forIntervals int) {
	snk := newSink(b)
	am := startAlertmanager(b, snk.srv.URL+"/am", 0)
	lab := netlab.New(b)
	db := pgcluster.Database(b)
	addr := freeAddr(b)
	col := startAlertCollector(b, db, addr, snk.alertConfig(b, am))
	startAgent(b, "lab-b", lab.B, addr, func(c *agentapp.Config) { c.Labels = agentapp.Labels{"customer": "acme"} })
	waitNode(b, col, "lab-b")
	alertname := "NBSRootCritical"
	if forIntervals > 0 {
		alertname = "ResetFast"
		if code, body := col.call(b, http.MethodPut, "/api/v1/alert-rules/1", `{"name":"NBSRootCritical","state":"crit","for_intervals":2,"severity":"critical","enabled":false}`); code != http.StatusOK {
			b.Fatalf("disable the default rule: HTTP %d %s", code, body)
		}
		body := fmt.Sprintf(`{"name":"ResetFast","metric":"tcp_reset","state":"crit","for_intervals":%d,"severity":"critical"}`, forIntervals)
		if code, out := col.call(b, http.MethodPost, "/api/v1/alert-rules", body); code != http.StatusCreated {
			b.Fatalf("create the rule: HTTP %d %s", code, out)
		}
	}
	labels := map[string]string{"alertname": alertname, "node": "lab-b", "root": "tcp_reset"}
	var toHook, toAMReceipt, toAMNotify, collectorShare []time.Duration
	// breach storms until both notifications of the k-th firing arrived,
	// then waits for the k-th resolve and a quiet spell.
	breach := func(k int, measure bool) {
		start := time.Now()
		storm(b, lab, 15*time.Second, func() string {
			if _, _, ok := snk.nbsNotifiedAt("firing", "lab-b", "tcp_reset", k); !ok {
				return "no webhook message"
			}
			if _, ok := snk.amNotifiedAt("firing", labels, k); !ok {
				return "no alertmanager notification"
			}
			return ""
		})
		hookAt, msg, _ := snk.nbsNotifiedAt("firing", "lab-b", "tcp_reset", k)
		amAt, _ := snk.amNotifiedAt("firing", labels, k)
		active := activeAlerts(b, am, labels)
		if len(active) != 1 {
			b.Fatalf("breach %d: alertmanager holds %d alerts", k, len(active))
		}
		observed, err := time.Parse(time.RFC3339Nano, msg.Alert.Annotations["observed_at"])
		if err != nil {
			b.Fatalf("observed_at: %v", err)
		}
		if measure {
			toHook = append(toHook, hookAt.Sub(start))
			toAMReceipt = append(toAMReceipt, active[0].UpdatedAt.Sub(start))
			toAMNotify = append(toAMNotify, amAt.Sub(start))
			collectorShare = append(collectorShare, hookAt.Sub(observed))
		}
		eventually(b, 15*time.Second, func() string {
			if _, _, ok := snk.nbsNotifiedAt("resolved", "lab-b", "tcp_reset", k); !ok {
				return "no resolve"
			}
			if _, ok := snk.amNotifiedAt("resolved", labels, k); !ok {
				return "no alertmanager resolve"
			}
			return ""
		})
		// Quiet, so the next breach starts from OK, then a random phase of
		// the agent's interval, as a real breach would have.
		time.Sleep(2*interval + rand.N(interval))
	}
	// The node's first breach is not measured: the agent announces the
	// reset and drop reasons it sees for the first time, which delays that
	// one report by a few hundred milliseconds.
	breach(1, false)
	b.ResetTimer()
	for i := range b.N {
		breach(i+2, true)
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"webhook", toHook}, {"am-receipt", toAMReceipt}, {"am-notify", toAMNotify}, {"collector", collectorShare}} {
		p50, p99 := percentile(m.d, 50), percentile(m.d, 99)
		b.ReportMetric(float64(p50.Milliseconds()), m.name+"-p50-ms")
		b.ReportMetric(float64(p99.Milliseconds()), m.name+"-p99-ms")
		b.Logf("%-10s n=%d p50 %s p99 %s min %s max %s", m.name, len(m.d), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
			slices.Min(m.d).Round(time.Millisecond), slices.Max(m.d).Round(time.Millisecond))
	}
	b.ReportMetric(0, "ns/op") // an iteration's time is the storm's, not a cost
}

// percentile is the nearest-rank percentile.
func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}
