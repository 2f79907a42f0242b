package app

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
)

// cliFlag is how the collector's flags read in its messages
// (--reports.max-definitions, --alertmanager.url): staff's vocabulary.
var cliFlag = regexp.MustCompile(`--[a-z]+\.[a-z-]+`)

// TestReportsShowCustomersNoInternals: the agent's own root is how NBS
// watches itself, staff's; a customer's report answers (JSON and CSV,
// asked for directly or through a saved definition) hold none of it, nor
// collector flags, while a viewer's report of the same node has the
// agent's incident (so the check proves something).
func TestReportsShowCustomersNoInternals(t *testing.T) {
	f := newFleet(t, access.Config{})
	ctx := context.Background()
	node, err := f.st.NodeByName(ctx, "acme-web")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := f.st.UpsertDefinitions(ctx, node.ID, []store.MetricDef{
		{Path: "agent", Title: "Agent", Kind: store.KindGauge},
		{Path: "agent/cpu", Title: "Agent CPU", Unit: "%", Kind: store.KindGauge},
	})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-2 * time.Minute).Truncate(time.Millisecond)
	if _, err := f.st.WriteReports(ctx, []store.Report{{NodeID: node.ID, InstanceID: node.InstanceID, Seq: 100, Time: at, IntervalMS: 1000,
		Samples: []store.Sample{{MetricID: ids["agent"], Path: "agent", Value: 1, State: store.StateCrit},
			{MetricID: ids["agent/cpu"], Path: "agent/cpu", Value: 97, State: store.StateCrit}}}}); err != nil {
		t.Fatal(err)
	}
	p := api.Prefix
	agentIncident := regexp.MustCompile(`"root":\s*"agent"`)
	code, _, body := f.do(viewer, "GET", p+"/reports?selector=customer%3Dacme", "")
	if code != 200 || !agentIncident.MatchString(body) || !strings.Contains(body, "agent/cpu") {
		t.Fatalf("viewer: GET /reports: %d, no agent incident explained by agent/cpu in %.600s", code, body)
	}
	for _, path := range []string{
		p + "/reports", p + "/reports?selector=customer%3Dacme", p + "/reports?format=csv",
		fmt.Sprintf("%s/reports?definition=%d", p, f.acmeReport), fmt.Sprintf("%s/reports?definition=%d&format=csv", p, f.acmeReport),
		p + "/report-definitions", fmt.Sprintf("%s/report-definitions/%d", p, f.acmeReport),
	} {
		code, _, body := f.do(acme, "GET", path, "")
		if code != 200 {
			t.Fatalf("acme: GET %s: %d %.300s", path, code, body)
		}
		if agentIncident.MatchString(body) || strings.Contains(body, "agent/cpu") || strings.Contains(body, "incident,acme-web,agent") {
			t.Errorf("acme: GET %s holds the agent's root: %.600s", path, body)
		}
		if m := cliFlag.FindString(body); m != "" {
			t.Errorf("acme: GET %s names the collector flag %s: %.300s", path, m, body)
		}
		if strings.Contains(path, "/reports") && !strings.Contains(body, "acme-web") {
			t.Errorf("acme: GET %s shows nothing of acme's node: %.300s", path, body)
		}
	}
}
