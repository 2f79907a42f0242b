package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/export"
)

// The Grafana dashboards of deploy/grafana: their structure is checked
// here, and every panel's query runs against a real Prometheus scraping a
// lab in TestPrometheusScrapesALab (no Grafana binary: Debian does not
// package one, and what a panel shows is its query's answer).

const dashboardDir = "../deploy/grafana/dashboards"

type gfTarget struct {
	RefID      string          `json:"refId"`
	Expr       string          `json:"expr"`
	Datasource *gfDatasource   `json:"datasource"`
	Raw        json.RawMessage `json:"-"`
}

type gfDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type gfPanel struct {
	ID         int           `json:"id"`
	Type       string        `json:"type"`
	Title      string        `json:"title"`
	Datasource *gfDatasource `json:"datasource"`
	GridPos    struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []gfTarget `json:"targets"`
	Panels  []gfPanel  `json:"panels"` // a collapsed row's
}

type gfVariable struct {
	Name       string        `json:"name"`
	Type       string        `json:"type"`
	Query      any           `json:"query"`
	Datasource *gfDatasource `json:"datasource"`
	Definition string        `json:"definition"`
}

type gfDashboard struct {
	file       string
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []gfVariable `json:"list"`
	} `json:"templating"`
	Panels []gfPanel `json:"panels"`
}

// panels is every panel, rows' included, in order.
func (d gfDashboard) panels() []gfPanel {
	var out []gfPanel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

func loadDashboards(t *testing.T) []gfDashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dashboardDir, err)
	}
	var out []gfDashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d gfDashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		d.file = filepath.Base(f)
		out = append(out, d)
	}
	return out
}

// grafanaBuiltins are the variables Grafana itself sets, and what a test
// puts for them.
var grafanaBuiltins = map[string]string{
	"__rate_interval": "30s",
	"__interval":      "1s",
	"__range":         "5m",
}

var (
	variableRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)
	familyRef   = regexp.MustCompile(`\bnbs_[a-z0-9_]+`)
)

// TestGrafanaDashboardsAreProvisioningReady checks what Grafana needs to
// load the dashboards from files with no import step: a unique uid and
// title, the data source as the variable DS (type datasource, Prometheus)
// on every panel and target, variables that are defined, panels on the
// 24-column grid with unique ids, a PromQL query in every target, and only
// metric names the collector's export can hold.
func TestGrafanaDashboardsAreProvisioningReady(t *testing.T) {
	families := map[string]bool{}
	for _, f := range export.New(nil, export.DefaultConfig()).Families() {
		families[f.Name] = true
	}
	uids, titles := map[string]string{}, map[string]string{}
	for _, d := range loadDashboards(t) {
		t.Run(d.file, func(t *testing.T) {
			for what, seen := range map[string]map[string]string{d.UID: uids, d.Title: titles} {
				if what == "" {
					t.Errorf("no uid or no title")
				} else if other, dup := seen[what]; dup {
					t.Errorf("%q is also %s's", what, other)
				}
				seen[what] = d.file
			}
			vars := map[string]bool{}
			hasDS := false
			for _, v := range d.Templating.List {
				vars[v.Name] = true
				if v.Name == "DS" {
					hasDS = v.Type == "datasource" && v.Query == "prometheus"
				} else if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${DS}") {
					t.Errorf("variable %s does not query the data source ${DS}", v.Name)
				}
			}
			if !hasDS {
				t.Fatalf("no variable DS of type datasource for prometheus: %+v", d.Templating.List)
			}
			ids := map[int]bool{}
			var cells [][]bool
			queries := 0
			for _, p := range d.panels() {
				if ids[p.ID] || p.ID == 0 {
					t.Errorf("panel %q: id %d is 0 or not unique", p.Title, p.ID)
				}
				ids[p.ID] = true
				if p.Title == "" {
					t.Errorf("panel %d has no title", p.ID)
				}
				g := p.GridPos
				if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
					t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, g)
				}
				for y := g.Y; y < g.Y+g.H; y++ {
					for len(cells) <= y {
						cells = append(cells, make([]bool, 24))
					}
					for x := g.X; x < min(g.X+g.W, 24); x++ {
						if cells[y][x] {
							t.Errorf("panel %q overlaps another at (%d,%d)", p.Title, x, y)
						}
						cells[y][x] = true
					}
				}
				if p.Type == "row" {
					continue
				}
				if p.Datasource == nil || p.Datasource.UID != "${DS}" || p.Datasource.Type != "prometheus" {
					t.Errorf("panel %q: data source %+v, want prometheus ${DS}", p.Title, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					queries++
					if tg.RefID == "" || refs[tg.RefID] {
						t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
					}
					refs[tg.RefID] = true
					if tg.Datasource != nil && tg.Datasource.UID != "${DS}" {
						t.Errorf("panel %q %s: data source %+v, want ${DS}", p.Title, tg.RefID, tg.Datasource)
					}
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("panel %q %s: no expr", p.Title, tg.RefID)
					}
					for _, m := range variableRef.FindAllStringSubmatch(tg.Expr, -1) {
						name := m[1] + m[2]
						if _, builtin := grafanaBuiltins[name]; !builtin && !vars[name] {
							t.Errorf("panel %q %s: $%s is not a variable of the dashboard", p.Title, tg.RefID, name)
						}
					}
					for _, name := range familyRef.FindAllString(tg.Expr, -1) {
						if !families[name] {
							t.Errorf("panel %q %s: %s is no family the export holds", p.Title, tg.RefID, name)
						}
					}
				}
			}
			if queries == 0 {
				t.Error("no queries")
			}
		})
	}
}

// dashboardQuery is one panel target's PromQL with its variables set.
type dashboardQuery struct {
	where string // dashboard, panel and refId
	expr  string
}

// dashboardQueries lists every target of every dashboard, with vars (and
// Grafana's builtins) put in.
func dashboardQueries(t *testing.T, vars map[string]string) []dashboardQuery {
	t.Helper()
	var out []dashboardQuery
	for _, d := range loadDashboards(t) {
		for _, p := range d.panels() {
			for _, tg := range p.Targets {
				expr := variableRef.ReplaceAllStringFunc(tg.Expr, func(ref string) string {
					m := variableRef.FindStringSubmatch(ref)
					name := m[1] + m[2]
					if v, ok := vars[name]; ok {
						return v
					}
					if v, ok := grafanaBuiltins[name]; ok {
						return v
					}
					t.Fatalf("%s %q: no value for $%s", d.file, p.Title, name)
					return ""
				})
				out = append(out, dashboardQuery{where: fmt.Sprintf("%s %q %s", d.file, p.Title, tg.RefID), expr: expr})
			}
		}
	}
	return out
}

// dashboardsAnswer waits until every dashboard query answers with data
// from prom, and says which did not.
func dashboardsAnswer(t *testing.T, prom *promServer, vars map[string]string, timeout time.Duration) {
	t.Helper()
	queries := dashboardQueries(t, vars)
	eventually(t, timeout, func() string {
		var empty []string
		for _, q := range queries {
			out, err := prom.tryQuery(q.expr, time.Time{})
			if err != nil {
				t.Fatalf("%s: %v", q.where, err)
			}
			if len(out) == 0 {
				empty = append(empty, q.where+": "+q.expr)
			}
		}
		if len(empty) > 0 {
			slices.Sort(empty)
			// What the scrape holds, to tell a missing series from a wrong query.
			var held []string
			for _, s := range prom.query(`count by (__name__, node) ({__name__=~"nbs_.+"})`, time.Time{}) {
				held = append(held, fmt.Sprintf("%s{node=%q} %v", s.Metric["__name__"], s.Metric["node"], s.Value.V))
			}
			slices.Sort(held)
			return fmt.Sprintf("%d of %d dashboard queries answer no data:\n%s\nthe series Prometheus holds now:\n%s",
				len(empty), len(queries), strings.Join(empty, "\n"), strings.Join(held, "\n"))
		}
		return ""
	})
	t.Logf("all %d dashboard queries answer with data", len(queries))
}

// exportDocExamples reads docs/export.md's examples: the PromQL of its
// promql blocks (one query a line, comments left out) and its rule file
// (the yaml block that starts with groups:), so the page's examples are
// run against the real Prometheus, as the dashboards are.
func exportDocExamples(t *testing.T) (queries []string, rules string) {
	t.Helper()
	b, err := os.ReadFile("../docs/export.md")
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	lang, in := "", false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			lang, in, block = strings.TrimPrefix(line, "```"), true, nil
		case in && strings.HasPrefix(line, "```"):
			in = false
			switch {
			case lang == "promql":
				for _, q := range block {
					if q = strings.TrimSpace(q); q != "" && !strings.HasPrefix(q, "#") {
						queries = append(queries, q)
					}
				}
			case lang == "yaml" && len(block) > 0 && block[0] == "groups:":
				rules = strings.Join(block, "\n") + "\n"
			}
		case in:
			block = append(block, line)
		}
	}
	if len(queries) == 0 || rules == "" {
		t.Fatalf("docs/export.md: %d PromQL examples and rules %q; want both", len(queries), rules)
	}
	return queries, rules
}
