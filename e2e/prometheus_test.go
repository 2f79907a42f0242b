package e2e

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// testCounterHold is the export's counter hold in these tests: longer than
// Prometheus's scrape interval (1s), so a new counter's first scrape is
// its held-back value and its first increase is seen as one, as
// --export.counter-hold (1m) does for a 15s or 30s scrape.
const testCounterHold = 3 * time.Second

// samplesOf is the raw samples Prometheus stored of the one series sel
// selects over the last d, oldest first.
func (p *promServer) samplesOf(sel string, d time.Duration) []promPoint {
	p.tb.Helper()
	out := p.query(fmt.Sprintf("%s[%dms]", sel, d.Milliseconds()), time.Time{})
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0].Values
	}
	p.tb.Fatalf("%s: %d series, want one: %+v", sel, len(out), out)
	return nil
}

// firstSampleAt is the first sample of sel with value v over the last
// minute; zero when there is none yet.
func (p *promServer) firstSampleAt(sel string, v float64) promPoint {
	for _, s := range p.samplesOf(sel, time.Minute) {
		if s.V == v {
			return s
		}
	}
	return promPoint{}
}

// A real Prometheus scrapes the collector's export while two agents in a
// namespace lab report real resets: the increase of
// nbs_tcp_resets_total{reason="no_socket"} over a window equals the
// kernel's count (nstat) and NBS's own API for the same window, exactly;
// then every query of every Grafana dashboard answers with data from the
// same Prometheus.
func TestPrometheusScrapesALab(t *testing.T) {
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) { c.Export.CounterHold = testCounterHold })
	for _, n := range []struct{ name, ns, addr string }{{"lab-a", lab.A, lab.IPA.String()}, {"lab-b", lab.B, lab.IPB.String()}} {
		startAgent(t, n.name, n.ns, col.grpcAddr, func(c *agentapp.Config) {
			c.Labels = agentapp.Labels{"customer": "acme"}
			c.PingAddress, c.PingInterval = n.addr, 100*time.Millisecond
		})
	}
	waitNode(t, col, "lab-a")
	waitNode(t, col, "lab-b")
	docQueries, docRules := exportDocExamples(t)
	prom := startPrometheusWithRules(t, docRules, scrapeJob{name: "nbs", target: col.httpAddr, token: col.token})
	prom.waitUp("nbs")

	// A first burst makes the reason's counter: its first scrapes hold it
	// at 0, then it is n1. That start is before the window, so what the
	// window must count is the second burst alone.
	const n1, n2 = 7, 20
	const sel = `nbs_tcp_resets_total{node="lab-b",direction="sent",reason="no_socket"}`
	lab.ResetNoSocket(t, n1)
	var t0 promPoint
	eventually(t, 30*time.Second, func() string {
		if t0 = prom.firstSampleAt(sel, n1); t0.T.IsZero() {
			return fmt.Sprintf("no sample %s = %d yet: %+v", sel, n1, prom.samplesOf(sel, time.Minute))
		}
		return ""
	})
	if held := prom.samplesOf(sel, time.Minute); held[0].V != 0 {
		t.Errorf("the counter's first sample is %v: its first increase was not held back, so Prometheus cannot see it (samples %+v)", held[0].V, held)
	}
	b0 := lab.Nstat(t, lab.B)
	lab.ResetNoSocket(t, n2)
	b1 := lab.Nstat(t, lab.B)
	kernel := float64(b1["TcpOutRsts"] - b0["TcpOutRsts"])
	var t1 promPoint
	eventually(t, 30*time.Second, func() string {
		if t1 = prom.firstSampleAt(sel, n1+n2); t1.T.IsZero() {
			return fmt.Sprintf("no sample %s = %d yet: %+v", sel, n1+n2, prom.samplesOf(sel, time.Minute))
		}
		return ""
	})

	// increase() extrapolates to the ends of its range unless a sample
	// sits on each end: the range is [t0, t1] exactly (both ends are
	// scrapes of the one target, so every node's series has a sample on
	// both), evaluated at t1 — Prometheus 2's range includes its start.
	w := t1.T.Sub(t0.T)
	got, err := prom.scalar(fmt.Sprintf(`sum(increase(nbs_tcp_resets_total{reason="no_socket"}[%dms]))`, w.Milliseconds()), t1.T)
	if err != nil {
		t.Fatal(err)
	}
	// The same from the raw counter at the two instants.
	raw, err := prom.scalar(fmt.Sprintf(`sum(nbs_tcp_resets_total{reason="no_socket"}) - sum(nbs_tcp_resets_total{reason="no_socket"} offset %dms)`, w.Milliseconds()), t1.T)
	if err != nil {
		t.Fatal(err)
	}
	// NBS's own API over the same window, by report time: from t0 (the
	// first burst's reports were stored, so were older, before t0 was
	// scraped) to a second after t1 — a sample is stamped when its scrape
	// starts and reads the database a moment later, so the report it
	// counts may be stamped just after t1; nothing was reset after the
	// burst for a later report to add.
	var s seriesResp
	if code := col.getJSON(t, fmt.Sprintf("/api/v1/nodes/lab-b/series?metric=tcp_reset/sent/no_socket&from=%d&to=%d", t0.T.UnixMilli(), t1.T.Add(time.Second).UnixMilli()), &s); code != http.StatusOK {
		t.Fatalf("series: HTTP %d", code)
	}
	var api float64
	for _, p := range s.Points {
		if p.Count != nil {
			api += *p.Count
		}
	}
	t.Logf("window %s (%s to %s): Prometheus increase %v, raw difference %v, nstat TcpOutRsts %v, NBS API %v",
		w, t0.T.Format(time.TimeOnly), t1.T.Format(time.TimeOnly), got, raw, kernel, api)
	for what, v := range map[string]float64{"increase()": got, "the raw counters' difference": raw, "nstat TcpOutRsts of lab-b": kernel, "NBS's API": api} {
		if v != n2 {
			t.Errorf("%s over the window: %v, want the %d resets caused", what, v, n2)
		}
	}
	// Why the range must sit on the scrapes: a quarter second wider on
	// each side, increase() stretches the same two samples' difference to
	// the range (w+0.5s)/w — Prometheus's extrapolation, not a reset
	// counted twice.
	loose, err := prom.scalar(fmt.Sprintf(`sum(increase(nbs_tcp_resets_total{reason="no_socket"}[%dms]))`, w.Milliseconds()+500), t1.T.Add(250*time.Millisecond))
	if want := n2 * (w + 500*time.Millisecond).Seconds() / w.Seconds(); err != nil || math.Abs(loose-want) > 1e-6 {
		t.Errorf("increase over the window widened by 0.5s: %v (%v), want the extrapolated %v", loose, err, want)
	}

	t.Run("dashboards", func(t *testing.T) {
		// "Children streamed now" asks for a child raised at the time of the
		// query: the resets go on while the queries run, a burst a second,
		// as the earlier bursts' raise may have cleared by now on a slow run.
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					lab.ResetNoSocket(t, n2)
				}
			}
		}()
		defer func() { close(stop); <-done }()
		dashboardsAnswer(t, prom, map[string]string{"DS": "", "node": "lab-b", "tenant": "acme"}, 60*time.Second)
	})
	// docs/export.md's examples: valid PromQL, rules Prometheus evaluates
	// without error, and the ping loss recording rule has every node.
	t.Run("docs", func(t *testing.T) {
		for _, q := range docQueries {
			if _, err := prom.tryQuery(strings.ReplaceAll(q, `node="web-1"`, `node="lab-b"`), time.Time{}); err != nil {
				t.Errorf("docs/export.md: %v", err)
			}
		}
		if got := prom.query(`sum by (direction, reason) (rate(nbs_tcp_resets_total{node="lab-b",reason!=""}[5m]))`, time.Time{}); len(got) == 0 {
			t.Error("docs/export.md's resets by reason answer nothing on lab-b")
		}
		eventually(t, 10*time.Second, func() string {
			for name, h := range prom.ruleHealth() {
				if h != "ok" {
					return fmt.Sprintf("rule %s: %s", name, h)
				}
			}
			if got := prom.query(`count(node:nbs_ping_loss:ratio_rate5m{node=~"lab-a|lab-b"})`, time.Time{}); len(got) != 1 || got[0].Value.V != 2 {
				return fmt.Sprintf("the ping loss recording rule has %+v nodes, want lab-a and lab-b", got)
			}
			return ""
		})
	})
}

// A customer token's scrape holds its tenant's series only, a token that
// is not one scrapes nothing (up 0), and ?match= narrows staff's scrape.
func TestPrometheusScrapeScopes(t *testing.T) {
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	for i, n := range []struct{ name, tenant string }{{"acme-1", "acme"}, {"acme-2", "acme"}, {"globex-1", "globex"}, {"infra-1", ""}} {
		a := &tenantAgent{t: t, addr: col.grpcAddr, name: n.name, ping: fmt.Sprintf("198.18.2.%d", i+1)}
		if err := a.connect("", n.tenant); err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
		a.resets(3+i, 4000)
	}
	acme := customerToken(t, col, "acme")
	prom := startPrometheus(t,
		scrapeJob{name: "staff", target: col.httpAddr, token: col.token},
		scrapeJob{name: "staff-globex", target: col.httpAddr, token: col.token, match: "customer=globex"},
		scrapeJob{name: "acme", target: col.httpAddr, token: acme},
		scrapeJob{name: "forged", target: col.httpAddr, token: "nbs_" + strings.Repeat("0", 40)},
	)
	for _, job := range []string{"staff", "staff-globex", "acme"} {
		prom.waitUp(job)
	}
	nodesOf := func(job string) []string {
		var out []string
		for _, s := range prom.query(fmt.Sprintf(`count by (node, tenant) ({job=%q, __name__=~"nbs_.+"})`, job), time.Time{}) {
			out = append(out, s.Metric["node"]+"@"+s.Metric["tenant"])
		}
		slices.Sort(out)
		return out
	}
	for job, want := range map[string][]string{
		"staff":        {"acme-1@acme", "acme-2@acme", "globex-1@globex", "infra-1@"},
		"staff-globex": {"globex-1@globex"},
		"acme":         {"acme-1@acme", "acme-2@acme"},
	} {
		if got := nodesOf(job); !slices.Equal(got, want) {
			t.Errorf("job %s scrapes nodes %v, want %v", job, got, want)
		}
	}
	// The customer's series are staff's, value for value.
	series := func(job string) map[string]float64 {
		out := map[string]float64{}
		for _, s := range prom.query(fmt.Sprintf(`{job=%q, __name__=~"nbs_.+"}`, job), time.Time{}) {
			delete(s.Metric, "job")
			out[fmt.Sprint(s.Metric)] = s.Value.V
		}
		return out
	}
	staff, customer := series("staff"), series("acme")
	for k, v := range customer {
		if sv, ok := staff[k]; !ok || sv != v {
			t.Errorf("acme scrapes %s = %v; staff %v (present %v)", k, v, sv, ok)
		}
	}
	if len(customer) < 8 {
		t.Errorf("acme's scrape holds %d series; want its two nodes' info, last report, states and resets: %v", len(customer), customer)
	}
	eventually(t, 10*time.Second, func() string {
		up, err := prom.scalar(`up{job="forged"}`, time.Time{})
		if err != nil || up != 0 {
			return fmt.Sprintf("the forged token's scrape: up %v (%v), want 0", up, err)
		}
		if !strings.Contains(prom.targets(), "401") {
			return "Prometheus does not show the forged token's scrape refused with 401: " + prom.targets()
		}
		return ""
	})
	if n := prom.query(`count({job="forged", __name__=~"nbs_.+"})`, time.Time{}); len(n) != 0 {
		t.Errorf("a forged token scraped %+v", n)
	}
}

// Owners come and go (pods churning): 1,000 cycles, each of which reports
// resets of owners never seen before. What Prometheus scrapes stays within
// the per-node cap all along (an overflow series takes the rest), and the
// owners that stopped leave the scrape once the export window has passed.
func TestPrometheusSeriesStayFlatUnderOwnerChurn(t *testing.T) {
	const (
		window  = 10 * time.Second
		cap     = 40
		cycles  = 1000
		perStep = 3 // new owners a cycle
	)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0", func(c *collectorapp.Config) {
		c.Export.Window, c.Export.CounterHold, c.Export.MaxSeriesPerNode = window, testCounterHold, cap
	})
	a := &tenantAgent{t: t, addr: col.grpcAddr, name: "churn-1", ping: "198.18.3.1"}
	if err := a.connect("", ""); err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, scrapeJob{name: "nbs", target: col.httpAddr, token: col.token})
	prom.waitUp("nbs")
	// A hundred cycles a second: the churn spans ten scrapes, each of
	// which must stay within the cap.
	pace := time.NewTicker(time.Second)
	defer pace.Stop()
	start := time.Now()
	for c := range cycles {
		a.seq++
		r := report(a.seq, sample("tcp_reset", perStep), sample("tcp_reset/sent", perStep), sample("tcp_reset/sent/no_socket", perStep))
		for j := range perStep {
			id := fmt.Sprintf("tcp_reset/sent/no_socket/pod:shop_cart-%d-%d", c, j)
			r.GetReport().NewMetrics = append(r.GetReport().NewMetrics, &nbsv1.MetricDefinition{Id: id, Title: "No socket in a pod", Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE})
			r.GetReport().Samples = append(r.GetReport().Samples, sample(id, 1))
		}
		// An agent sends on while reports wait for their acks: so does
		// this one, to a hundred reports in flight.
		if c%100 < 99 {
			if err := a.stream.Send(r); err != nil {
				t.Fatalf("send report %d: %v", a.seq, err)
			}
			continue
		}
		a.sendAcked(r)
		<-pace.C
	}
	churn := time.Since(start)
	// Every scrape of the churn, counted by Prometheus itself.
	ran := time.Since(start) + 2*time.Second
	maxScraped, err := prom.scalar(fmt.Sprintf(`max_over_time(scrape_samples_scraped{job="nbs"}[%dms])`, ran.Milliseconds()), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	scrapes, err := prom.scalar(fmt.Sprintf(`count_over_time(scrape_samples_scraped{job="nbs"}[%dms])`, churn.Milliseconds()), time.Time{})
	if err != nil || scrapes < 5 {
		t.Errorf("%v scrapes during the churn (%v); want about ten", scrapes, err)
	}
	owners, err := prom.scalar(fmt.Sprintf(`count(count_over_time(nbs_tcp_resets_by_owner_total[%dms]))`, ran.Milliseconds()), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// The cap counts a node's series but its info and last report; past
	// it each counter family has one overflow series.
	bound := float64(cap + 2 + 2)
	t.Logf("%d cycles (%d owners) in %s, %v scrapes: at most %v series in a scrape (bound %v); %v owner series over the run", cycles, cycles*perStep, churn.Round(time.Millisecond), scrapes, maxScraped, bound, owners)
	if maxScraped > bound {
		t.Errorf("a scrape held %v series during the churn, more than the cap allows (%v)", maxScraped, bound)
	}
	if maxScraped < cap {
		t.Errorf("no scrape reached the cap (at most %v series): the churn did not test it", maxScraped)
	}
	overflow := prom.query(`nbs_tcp_resets_by_owner_total{owner="_overflow"}`, time.Time{})
	if len(overflow) != 1 {
		t.Errorf("overflow series %+v; want the owners past the cap summed into one", overflow)
	}
	// Gone owners leave: the node goes on reporting its roots, and once
	// the window has passed with no report moving them, no owner is
	// exported, and the scrape is back to the node's few series.
	var last time.Time
	eventually(t, window+15*time.Second, func() string {
		if time.Since(last) >= time.Second {
			a.seq++
			a.sendAcked(report(a.seq, sample("tcp_reset", 0)))
			last = time.Now()
		}
		if n := prom.query(`count(nbs_tcp_resets_by_owner_total)`, time.Time{}); len(n) != 0 {
			return fmt.Sprintf("%v owner series still scraped %s after the churn", n[0].Value.V, time.Since(start)-churn)
		}
		return ""
	})
	if n := prom.query(`nbs_node_info{node="churn-1"}`, time.Time{}); len(n) != 1 {
		t.Errorf("the node itself left the scrape (%+v): the owners' leaving proves nothing", n)
	}
	after, err := prom.scalar(`scrape_samples_scraped{job="nbs"}`, time.Time{})
	if err != nil || after > 10 {
		t.Errorf("after the window the scrape holds %v series (%v); want the node's few", after, err)
	}
}
