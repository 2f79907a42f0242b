package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func put(t *testing.T, c *collector, path, body string) (int, string) {
	t.Helper()
	code, b := c.call(t, http.MethodPut, path, body)
	return code, string(b)
}

// An operator override reaches the agent without a restart and changes the
// state the agent evaluates; invalid overrides are refused with the reason.
func TestThresholdOverrideReachesTheAgent(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-b", lab.B, col.grpcAddr, func(c *agentapp.Config) { c.Labels = agentapp.Labels{"customer": "acme"} })
	waitNode(t, col, "lab-b")
	const base = "/api/v1"

	bad := []struct{ body, want string }{
		{`{"scope":{"kind":"global"},"metric":"tcp_reset","threshold":{"warn":5,"crit":1,"comparison":"above"}}`, "must not be above crit"},
		{`{"scope":{"kind":"planet"},"metric":"tcp_reset","threshold":{"warn":1,"crit":5,"comparison":"above"}}`, "must be global, selector or node"},
		{`{"scope":{"kind":"global"},"metric":"tcp_reset"}`, "threshold is required"},
		{`{"scope":{"kind":"global"},"metric":"tcp_reset","bogus":1}`, "unknown field"},
		{`not json`, "request body"},
	}
	for _, b := range bad {
		code, body := put(t, col, base+"/thresholds", b.body)
		if code != http.StatusBadRequest || !strings.Contains(body, b.want) {
			t.Errorf("PUT %s: HTTP %d %s; want 400 mentioning %q", b.body, code, body, b.want)
		}
	}
	if code, _ := put(t, col, base+"/thresholds", `{"metric":"`+strings.Repeat("x", 2<<20)+`"}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT of 2 MiB: HTTP %d, want 413", code)
	}

	// Default crit for a reason is 10/s: 4 resets in an interval stay below it.
	// A selector override for this customer lowers crit to 2/s.
	code, body := put(t, col, base+"/thresholds", `{"scope":{"kind":"selector","selector":{"customer":"acme"}},
		"metric":"tcp_reset/sent/no_socket","threshold":{"warn":1,"crit":2,"comparison":"above","hold_intervals":1}}`)
	if code != http.StatusOK {
		t.Fatalf("PUT override: HTTP %d %s", code, body)
	}
	var eff struct {
		Thresholds []struct {
			Metric    string `json:"metric"`
			Source    string `json:"source"`
			Threshold *struct {
				Crit float64 `json:"crit"`
			} `json:"threshold"`
		} `json:"thresholds"`
	}
	lab.ResetNoSocket(t, 1) // defines the metric on the node
	eventually(t, withinTwoIntervals, func() string {
		col.getJSON(t, base+"/nodes/lab-b/thresholds", &eff)
		for _, e := range eff.Thresholds {
			if e.Metric == "tcp_reset/sent/no_socket" && e.Source == "selector:customer=acme" && e.Threshold != nil && e.Threshold.Crit == 2 {
				return ""
			}
		}
		return fmt.Sprintf("effective thresholds %+v do not show the override", eff.Thresholds)
	})

	// The agent evaluates with the override: 4 resets within one interval
	// are at least 2/s over any interval split, hence CRIT on the child.
	since := time.Now()
	lab.ResetNoSocket(t, 4)
	var s seriesResp
	eventually(t, withinTwoIntervals, func() string {
		col.getJSON(t, fmt.Sprintf("%s/nodes/lab-b/series?metric=tcp_reset/sent/no_socket&from=%d", base, since.Add(-interval).UnixMilli()), &s)
		for _, p := range s.Points {
			if p.State == "crit" {
				return ""
			}
		}
		return fmt.Sprintf("no CRIT point after the override: %+v", s.Points)
	})
	var tr treeResp
	col.getJSON(t, base+"/nodes/lab-b/tree", &tr)
	raw, _ := json.Marshal(tr)
	if !bytes.Contains(raw, []byte("no_socket")) {
		t.Errorf("tree lacks the no_socket child: %s", raw)
	}
}
