package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// The on-call fleet of issue 27: scaleSilent nodes gone silent (a pending
// alert each) and one node down for good (a firing CRIT), plus scaleLate
// nodes that go silent one after another while a client pages.
const (
	scaleSilent = 3000
	scaleLate   = 40
)

// alertList is GET /alerts' answer, as far as this test reads it.
type alertList struct {
	Alerts []struct {
		ID       int64  `json:"id"`
		Rule     string `json:"rule"`
		Node     string `json:"node"`
		State    string `json:"state"`
		Severity string `json:"severity"`
	} `json:"alerts"`
	Total      int               `json:"total"`
	Totals     alert.AlertTotals `json:"totals"`
	Limit      int               `json:"limit"`
	NextCursor string            `json:"next_cursor"`
	Groups     []struct {
		Rule  string `json:"rule"`
		Count int    `json:"count"`
	} `json:"groups"`
}

func (s site) alerts(t *testing.T, query url.Values) alertList {
	t.Helper()
	code, body := s.do(t, http.MethodGet, "/api/v1/alerts?"+query.Encode(), "")
	var l alertList
	if err := json.Unmarshal([]byte(body), &l); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/v1/alerts?%s: HTTP %d %v %.300s", query.Encode(), code, err, body)
	}
	return l
}

// TestAlertsAtScale: 3,000 open alerts and one firing CRIT, through a real
// collector (its own alert evaluator opens them) on a real PostgreSQL: the
// API's first page shows the CRIT first, its totals are exact (a customer's
// count only its nodes), the cursor walks every alert once while new ones
// open between pages; in Chromium the header counts the CRIT and the
// alerts page shows it on the first screen, and the alerts page loads as
// fast as the fleet page of the same nodes (timings logged; BENCHMARKS.md).
func TestAlertsAtScale(t *testing.T) {
	dbURL := pgcluster.Database(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pool := st.Pool()
	// The rules, before the collector's evaluator reads them: a silent node
	// of the simulated fleet is critical (as NBSNodeSilent is) but pending
	// for an hour; the database node down fires critical after two seconds.
	// Both critical: only firing-before-pending puts the one that fired first.
	if _, err := pool.Exec(ctx, `UPDATE alert_rules SET enabled = false WHERE name = 'NBSNodeSilent';
		INSERT INTO alert_rules (name, kind, metric, state, for_seconds, severity, selector)
		VALUES ('node_silent', 'silent', '*', 'unknown', 3600, 'critical', '{"customer":"sim"}'),
		       ('db_down', 'silent', '*', 'unknown', 2, 'critical', '{"customer":"db"}')`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var nodes []silentNode
	for i := 1; i <= scaleSilent; i++ {
		nodes = append(nodes, silentNode{fmt.Sprintf("sim-%d", i), "sim", time.Second})
	}
	nodes = append(nodes, silentNode{"db-1", "db", time.Second})
	// Counted from the evaluator's start, a node is pending after three
	// intervals: these at 9 s, 9.1 s, … one every 0.1 s (the evaluator's
	// silent pass runs every second: a few a pass).
	for i := range scaleLate {
		nodes = append(nodes, silentNode{fmt.Sprintf("late-%d", i), "sim", 3*time.Second + time.Duration(i)*100*time.Millisecond/3})
	}
	seedSilent(t, st, nodes)
	t.Logf("seeded %d nodes in %s", len(nodes), time.Since(start).Round(time.Millisecond))

	httpAddr, _, adminToken := startCollector(t, dbURL, alert.DefaultConfig())
	nbs := site{base: "http://" + httpAddr, token: adminToken}
	open := url.Values{"state": {"open"}}
	eventually(t, 60*time.Second, func() string {
		if l := nbs.alerts(t, open); l.Totals.Firing != 1 || l.Totals.Pending < scaleSilent {
			return fmt.Sprintf("totals %+v: want 1 firing and %d pending", l.Totals, scaleSilent)
		}
		return ""
	})

	// The walk: pages of 500 while the late nodes' alerts open between them.
	before := openIDs(t, pool)
	seen := map[int64]int{}
	q := url.Values{"state": {"open"}, "limit": {"500"}}
	for page := 0; ; page++ {
		if page > 20 {
			t.Fatal("no last page after 20 pages of 500")
		}
		l := nbs.alerts(t, q)
		if page == 0 {
			if a := l.Alerts[0]; a.Node != "db-1" || a.Rule != "db_down" || a.State != "firing" || a.Severity != "critical" {
				t.Errorf("the first page starts with %+v; want db-1's firing db_down", a)
			}
		}
		if len(l.Alerts) > 500 {
			t.Fatalf("a page of %d alerts; limit 500", len(l.Alerts))
		}
		for _, a := range l.Alerts {
			seen[a.ID]++
			if seen[a.ID] == 2 {
				t.Errorf("alert %d (%s) came twice", a.ID, a.Node)
			}
		}
		if l.NextCursor == "" {
			break
		}
		q.Set("cursor", l.NextCursor)
		// Wait for an alert to open before the next page (the late nodes go
		// silent a few a second, until they are all pending).
		if n := len(openIDs(t, pool)); n < scaleSilent+1+scaleLate {
			eventually(t, 10*time.Second, func() string {
				if m := len(openIDs(t, pool)); m == n {
					return fmt.Sprintf("no alert opened after %d", n)
				}
				return ""
			})
		}
	}
	missing := 0
	for _, id := range before {
		if seen[id] == 0 {
			missing++
		}
	}
	if missing > 0 || len(before) < scaleSilent+1 {
		t.Errorf("the walk missed %d of the %d alerts open when it began", missing, len(before))
	}
	t.Logf("walked %d alerts (%d open when it began, %d now)", len(seen), len(before), len(openIDs(t, pool)))

	// Once every late node is pending: the totals are exact, for staff and
	// for each customer (who counts only its own nodes).
	eventually(t, 30*time.Second, func() string {
		if l := nbs.alerts(t, open); l.Totals.Pending != scaleSilent+scaleLate {
			return fmt.Sprintf("totals %+v: want %d pending", l.Totals, scaleSilent+scaleLate)
		}
		return ""
	})
	sim := site{base: nbs.base, token: nbs.createToken(t, `{"name":"scale-sim","role":"customer","selector":{"customer":"sim"}}`)}
	db := site{base: nbs.base, token: nbs.createToken(t, `{"name":"scale-db","role":"customer","selector":{"customer":"db"}}`)}
	for _, c := range []struct {
		who               string
		s                 site
		firing, pending   int
		first, firstState string
	}{
		{"staff", nbs, 1, scaleSilent + scaleLate, "db-1", "firing"},
		{"customer=sim", sim, 0, scaleSilent + scaleLate, "late-39", "pending"},
		{"customer=db", db, 1, 0, "db-1", "firing"},
	} {
		l := c.s.alerts(t, url.Values{"state": {"open"}, "limit": {"100"}, "groups": {"true"}})
		want := alert.AlertTotals{Firing: c.firing, Pending: c.pending}
		if l.Totals != want || l.Total != c.firing+c.pending || len(l.Alerts) != min(100, l.Total) || l.Alerts[0].Node != c.first || l.Alerts[0].State != c.firstState {
			t.Errorf("%s: totals %+v, total %d, %d alerts, first %+v; want %+v, %d, first %s %s", c.who, l.Totals, l.Total, len(l.Alerts), l.Alerts[0], want, c.firing+c.pending, c.first, c.firstState)
		}
		if (l.NextCursor == "") != (l.Total <= 100) {
			t.Errorf("%s: next_cursor %q with %d alerts in all", c.who, l.NextCursor, l.Total)
		}
		var groups []string
		for _, g := range l.Groups {
			groups = append(groups, fmt.Sprintf("%s×%d", g.Rule, g.Count))
		}
		wantGroups := map[string]string{"staff": "db_down×1 node_silent×3040", "customer=sim": "node_silent×3040", "customer=db": "db_down×1"}[c.who]
		if strings.Join(groups, " ") != wantGroups {
			t.Errorf("%s: groups %v; want %s", c.who, groups, wantGroups)
		}
	}
	var firing, pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'firing'), count(*) FILTER (WHERE state = 'pending') FROM alert_instances`).Scan(&firing, &pending); err != nil {
		t.Fatal(err)
	}
	if firing != 1 || pending != scaleSilent+scaleLate {
		t.Errorf("the database holds %d firing and %d pending; the API said 1 and %d", firing, pending, scaleSilent+scaleLate)
	}

	benchPages(t, nbs)
	browseAlertsAtScale(t, nbs)
}

type silentNode struct {
	name, customer string
	interval       time.Duration
}

// seedSilent registers nodes straight into the collector's store with one
// report each, as an agent's Hello and first report would leave them; they
// never report again.
func seedSilent(t *testing.T, st *store.Store, nodes []silentNode) {
	t.Helper()
	ctx := context.Background()
	defs := []store.MetricDef{{Path: "agent", Title: "Agent overhead", Unit: "% of a CPU", Kind: store.KindGauge, Scale: 1}}
	batch := make([]store.Report, 0, 500)
	flush := func() {
		if _, err := st.WriteReports(ctx, batch); err != nil {
			t.Fatalf("seed reports: %v", err)
		}
		batch = batch[:0]
	}
	at := time.Now()
	for i, n := range nodes {
		ms := uint32(n.interval.Milliseconds())
		id, err := st.UpsertNode(ctx, store.Node{Name: n.name, InstanceID: 1, IntervalMS: ms, AgentVersion: "simulated", KernelRelease: "6.18",
			Labels: map[string]string{"customer": n.customer, "rack": fmt.Sprintf("r%d", i%10)}})
		if err != nil {
			t.Fatalf("seed %s: %v", n.name, err)
		}
		mids, err := st.UpsertDefinitions(ctx, id, defs)
		if err != nil {
			t.Fatalf("seed %s: %v", n.name, err)
		}
		batch = append(batch, store.Report{NodeID: id, InstanceID: 1, Seq: 1, Time: at, IntervalMS: ms,
			Samples: []store.Sample{{MetricID: mids["agent"], Path: "agent", Value: 0.3, State: store.StateOK}}})
		if len(batch) == cap(batch) {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

func openIDs(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id FROM alert_instances WHERE state <> 'resolved'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// benchPages times the API calls each page makes when it loads, at once as
// the browser makes them, alerts beside fleet, interleaved in the same run:
// the alerts page asks its open alerts (a page and the groups) and its
// history; the header its first open alerts; the fleet page one page of
// nodes worst first.
func benchPages(t *testing.T, nbs site) {
	t.Helper()
	const runs = 40
	pages := []struct {
		name  string
		calls []string
	}{
		{"alerts page", []string{"/api/v1/alerts?state=open&limit=100&groups=true", "/api/v1/alerts?state=resolved&limit=100"}},
		{"header", []string{"/api/v1/alerts?state=open&limit=50"}},
		{"fleet page", []string{"/api/v1/fleet?sort=state&limit=100"}},
	}
	took := make([][]time.Duration, len(pages))
	for range runs {
		for i, p := range pages {
			t0 := time.Now()
			var wg sync.WaitGroup
			for _, c := range p.calls {
				wg.Go(func() {
					if err := nbs.fetch(c); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			took[i] = append(took[i], time.Since(t0))
		}
	}
	for i, p := range pages {
		d := took[i]
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		t.Logf("bench api: %-11s median %6.1f ms  p90 %6.1f ms  (%d runs: %s)", p.name, ms(d[len(d)/2]), ms(d[len(d)*9/10]), runs, strings.Join(p.calls, " + "))
	}
}

// fetch GETs path and reads the answer; safe outside the test's goroutine.
func (s site) fetch(path string) error {
	req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d %.200s", resp.StatusCode, body)
	}
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// browseAlertsAtScale runs web/e2e/alerts_scale.mjs in Chromium: the header
// counts the firing CRIT, the alerts page shows it on the first screen
// beside the silent fleet's one row, and page loads are timed.
func browseAlertsAtScale(t *testing.T, nbs site) {
	t.Helper()
	webDir, nodeBin, _ := browserSetup(t)
	if body := nbs.get(t, "/"); !strings.Contains(body, `id="app"`) {
		skipOrFail(t, "the collector in this test binary embeds no UI: %.200s", body)
	}
	cmdCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cmdCtx, nodeBin, filepath.Join(webDir, "e2e", "alerts_scale.mjs"))
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(), "NBS_URL="+nbs.base, "NBS_TOKEN="+nbs.token, "NBS_CHROMIUM="+chromium,
		fmt.Sprintf("NBS_OPEN_ALERTS=%d", scaleSilent+scaleLate+1), "NBS_CRIT_NODE=db-1", "NBS_CRIT_RULE=db_down", "NBS_GROUP_RULE=node_silent")
	out := &lineLogger{t: t}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		t.Fatalf("alerts_scale.mjs: %v", err)
	}
}
