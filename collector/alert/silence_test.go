package alert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert/notify/alertmanager"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/api/apitest"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// startAlertmanager runs Debian's prometheus-alertmanager on loopback
// (routing everything to a sink nobody reads) and returns its base URL.
// Without the binary the test fails under CI=true and is skipped elsewhere.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	var bin string
	for _, name := range []string{"prometheus-alertmanager", "alertmanager"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		const msg = "prometheus-alertmanager not found (apt-get install prometheus-alertmanager)"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s; CI=true requires it", msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	cfg := "route:\n  receiver: sink\nreceivers:\n  - name: sink\n"
	if err := os.WriteFile(filepath.Join(dir, "am.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "am.yml"), "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start alertmanager: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	base := "http://" + addr
	for deadline := time.Now().Add(15 * time.Second); ; {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-exited:
			t.Fatalf("alertmanager exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("alertmanager not ready within 15s: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// amSilenceState is a silence as Alertmanager's GET /api/v2/silence/{id} shows it.
type amSilenceState struct {
	ID       string `json:"id"`
	Matchers []struct {
		Name, Value string
	} `json:"matchers"`
	CreatedBy string `json:"createdBy"`
	Comment   string `json:"comment"`
	Status    struct {
		State string `json:"state"`
	} `json:"status"`
}

func getSilence(t *testing.T, base, id string) amSilenceState {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/silence/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s amSilenceState
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("decode silence %s: %v", id, err)
	}
	return s
}

// Silencing a firing alert from NBS creates an Alertmanager silence on its
// exact labels, which Alertmanager then applies to the alert; ending it
// expires the silence there. Acknowledging is NBS's own. Every step is
// audited, answers as openapi.json says, and a customer sees the state
// without the names.
func TestAlertSilenceThroughAlertmanager(t *testing.T) {
	am := startAlertmanager(t)
	rcv := newReceivers(t)
	f := newFixture(t, pgcluster.Database(t))
	cfg := rcv.config(t)
	cfg.AlertmanagerURLs = URLList{am}
	svc := start(t, f.st, cfg, "silence")
	waitLeading(t, svc)

	r := chi.NewRouter()
	acc, err := access.New(nil, access.Config{Mode: access.ModeNone}, nil) // everyone is admin
	if err != nil {
		t.Fatal(err)
	}
	r.Mount(api.Prefix, api.V1(api.Routes(api.Parts{Alerts: svc.Service}), acc))
	srv := httptest.NewServer(r)
	defer srv.Close()
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	idPath := regexp.MustCompile(`^/alerts/[0-9]+`)
	do := func(method, path, body string) (int, AlertDetail, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/api/v1"+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if err := doc.CheckResponse(method, idPath.ReplaceAllString(path, "/alerts/{id}"), resp.StatusCode, b); err != nil {
			t.Error(err)
		}
		var v AlertDetail
		_ = json.Unmarshal(b, &v)
		return resp.StatusCode, v, string(b)
	}

	f.report(t, svc.Service, 0)
	f.report(t, svc.Service, 187)
	f.report(t, svc.Service, 187)
	var id int64
	waitFor(t, 5*time.Second, func() string {
		insts, err := svc.repo.openInstances(t.Context())
		if err != nil {
			return err.Error()
		}
		for _, in := range insts {
			if in.State == Firing && in.RuleName == "NBSRootCritical" {
				id = in.ID
				ds, _ := svc.repo.deliveries(t.Context(), id)
				if deliveryStatus(ds) != "delivered" {
					return "firing, not yet delivered: " + deliveryStatus(ds)
				}
				return ""
			}
		}
		return "no firing alert"
	})
	path := fmt.Sprintf("/alerts/%d", id)
	if code, v, body := do("GET", path, ""); code != 200 || v.Delivery != "delivered" || v.SilencedUntil != nil || v.AcknowledgedAt != nil {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}

	// Acknowledge: NBS's record, audited.
	if code, v, body := do("POST", path+"/acknowledge", `{"comment":"looking at the resets"}`); code != 200 || v.AcknowledgedAt == nil || v.AckComment != "looking at the resets" {
		t.Fatalf("acknowledge: %d %s", code, body)
	}

	// Silence: Alertmanager gets a silence on the alert's labels and
	// applies it to the alert NBS posted.
	for _, bad := range []string{`{"duration_seconds":5}`, `{"duration_seconds":99999999}`, `{"duration_seconds":600,"comment":"` + strings.Repeat("x", 1001) + `"}`} {
		if code, _, body := do("POST", path+"/silence", bad); code != 400 {
			t.Errorf("POST silence %.60s: %d %s, want 400", bad, code, body)
		}
	}
	code, v, body := do("POST", path+"/silence", `{"duration_seconds":3600,"comment":"maintenance"}`)
	if code != 200 || v.SilencedUntil == nil || time.Until(*v.SilencedUntil) < 59*time.Minute || v.SilenceComment != "maintenance" {
		t.Fatalf("silence: %d %s", code, body)
	}
	var amID string
	var matchers map[string]string
	if err := f.st.Pool().QueryRow(t.Context(), `SELECT am_ids->>$1, matchers FROM alert_silences WHERE instance_id = $2`, am, id).Scan(&amID, &matchers); err != nil {
		t.Fatalf("silence record: %v", err)
	}
	sil := getSilence(t, am, amID)
	if sil.Status.State != "active" || sil.Comment != "maintenance" || len(sil.Matchers) != len(matchers) {
		t.Fatalf("alertmanager silence %+v, want active with one matcher per label of %v", sil, matchers)
	}
	for _, m := range sil.Matchers {
		if matchers[m.Name] != m.Value {
			t.Errorf("matcher %s=%s, alert has %s=%s", m.Name, m.Value, m.Name, matchers[m.Name])
		}
	}
	waitFor(t, 5*time.Second, func() string {
		resp, err := http.Get(am + "/api/v2/alerts?silenced=true&filter=alertname%3D%22NBSRootCritical%22")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		var alerts []struct {
			Status struct {
				State      string   `json:"state"`
				SilencedBy []string `json:"silencedBy"`
			} `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
			return err.Error()
		}
		if len(alerts) != 1 || alerts[0].Status.State != "suppressed" || len(alerts[0].Status.SilencedBy) != 1 || alerts[0].Status.SilencedBy[0] != amID {
			return fmt.Sprintf("alertmanager alerts %+v, want the alert suppressed by %s", alerts, amID)
		}
		return ""
	})

	// The webhook, which has no silences, hears nothing while silenced:
	// the resolve is not sent.
	before := len(rcv.events())
	f.report(t, svc.Service, 0)
	waitFor(t, 5*time.Second, func() string {
		if _, v, _ := do("GET", path, ""); v.State != string(Resolved) {
			return "not resolved yet: " + v.State
		}
		return ""
	})
	if ev := rcv.events(); len(ev) != before {
		t.Errorf("webhook sent %v while silenced", ev[before:])
	}

	// Unsilence: expired in Alertmanager as well; a second time is a conflict.
	if code, v, body := do("DELETE", path+"/silence", ""); code != 200 || v.SilencedUntil != nil {
		t.Fatalf("unsilence: %d %s", code, body)
	}
	if s := getSilence(t, am, amID); s.Status.State != "expired" {
		t.Errorf("alertmanager silence after unsilence: %s, want expired", s.Status.State)
	}
	if code, _, body := do("DELETE", path+"/silence", ""); code != 409 {
		t.Errorf("second unsilence: %d %s, want 409", code, body)
	}
	if code, _, body := do("POST", path+"/acknowledge", `{}`); code != 409 {
		t.Errorf("acknowledge a resolved alert: %d %s, want 409", code, body)
	}

	// Audited: acknowledge, silence, unsilence, with who and what.
	rows, err := f.st.Pool().Query(t.Context(), `SELECT action FROM audit_log WHERE object_kind = 'alert' AND object_id = $1 ORDER BY id`, fmt.Sprint(id))
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for rows.Next() {
		var a string
		_ = rows.Scan(&a)
		actions = append(actions, a)
	}
	rows.Close()
	if fmt.Sprint(actions) != "[acknowledge silence unsilence]" {
		t.Errorf("audit log %v, want acknowledge, silence, unsilence", actions)
	}

	// A customer sees that it was acknowledged, not by whom or why.
	stored, _, _ := svc.repo.alertByID(t.Context(), id, access.Principal{Role: access.RoleAdmin})
	cv := forViewer(svc.storedView(&stored), access.Principal{Name: "acme", Role: access.RoleCustomer})
	if cv.AcknowledgedAt == nil || cv.AcknowledgedBy != "" || cv.AckComment != "" {
		t.Errorf("customer view: acknowledged %v by %q (%q); want the time only", cv.AcknowledgedAt, cv.AcknowledgedBy, cv.AckComment)
	}
}

func TestDeliveryStatus(t *testing.T) {
	cases := []struct {
		ds   []Delivery
		want string
	}{
		{nil, "none"},
		{[]Delivery{{Event: "firing", Status: "delivered"}, {Event: "firing", Status: "delivered"}}, "delivered"},
		{[]Delivery{{Event: "firing", Status: "delivered"}, {Event: "firing", Status: "pending"}}, "pending"},
		{[]Delivery{{Event: "firing", Status: "delivered"}, {Event: "firing", Status: "failed"}}, "failed"},
		// The newest event counts: a failed firing then a delivered resolve.
		{[]Delivery{{Event: "firing", Status: "failed"}, {Event: "resolved", Status: "delivered"}}, "delivered"},
	}
	for _, c := range cases {
		if got := deliveryStatus(c.ds); got != c.want {
			t.Errorf("deliveryStatus(%v) = %s, want %s", c.ds, got, c.want)
		}
	}
}

// A node that stops reporting pages through a silent rule, with a summary
// that says so and a link to the node over the silence; its next report
// resolves it. (The default NBSNodeSilent waits 3 minutes; this rule 2 s.)
func TestNodeSilentPagesAndResolves(t *testing.T) {
	rcv := newReceivers(t)
	f := newFixture(t, pgcluster.Database(t))
	ctx := t.Context()
	if _, err := f.st.Pool().Exec(ctx, `UPDATE alert_rules SET enabled = false`); err != nil {
		t.Fatal(err)
	}
	if _, err := (repo{f.st.Pool()}).createRule(ctx, Rule{Name: "QuickSilent", Kind: KindSilent, Metric: "*", State: "unknown",
		ForSeconds: 2, Severity: "critical", Selector: map[string]string{"customer": "acme"}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	svc := start(t, f.st, rcv.config(t), "silent")
	waitLeading(t, svc)
	f.report(t, svc.Service, 0)
	waitFor(t, 8*time.Second, func() string {
		if ev := rcv.events(); len(ev) != 1 || ev[0] != "firing:QuickSilent:web-1:" {
			return fmt.Sprintf("webhook events %v, want QuickSilent firing for web-1", ev)
		}
		return ""
	})
	// The webhook and Alertmanager are posted to independently: wait for
	// the Alertmanager post too.
	var a alertmanager.Alert
	waitFor(t, 5*time.Second, func() string {
		if got, n := rcv.lastAM("QuickSilent", "web-1"); n > 0 {
			a = got
			return ""
		}
		return "no Alertmanager post of QuickSilent for web-1"
	})
	if !strings.HasPrefix(a.Annotations["summary"], "web-1 has sent no report for ") || a.Labels["metric"] != "" ||
		!strings.Contains(a.Annotations["tree_url"], "/nodes/web-1?from=") {
		t.Errorf("silent alert annotations %v labels %v", a.Annotations, a.Labels)
	}
	// It reports again (after the silence began): resolved.
	f.clock = time.Now().Add(-time.Second).Truncate(time.Millisecond)
	f.report(t, svc.Service, 0)
	waitFor(t, 5*time.Second, func() string {
		if ev := rcv.events(); len(ev) != 2 || ev[1] != "resolved:QuickSilent:web-1:" {
			return fmt.Sprintf("webhook events %v, want the resolve", ev)
		}
		return ""
	})
}
