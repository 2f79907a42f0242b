package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/export/otlp"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The OTLP receiver's basic-auth user and password; the hash is its bcrypt
// (cost 4) in Prometheus's web config.
const (
	otlpPromUser     = "nbs"
	otlpPromPassword = "otlp-e2e-secret"
	otlpPromHash     = "$2a$04$1408AG.Wnt6CaT8hqqnp8uF41nYNcf.yIg.KrMdC8ryCHyNrmvR5i"
)

// prometheus3Binary builds (once per version, cached: tools/prometheus/
// build.sh, which make test runs before the tests) Prometheus 3, which has
// the OTLP receiver Debian's 2.x lacks.
func prometheus3Binary(t *testing.T) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "../tools/prometheus/build.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build Prometheus 3 (tools/prometheus/build.sh): %v: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// otlpPrometheus runs a real Prometheus 3 with its OTLP receiver on
// loopback, behind basic auth, promoting the node's Resource attributes
// host.name and nbs.tenant to labels (docs/export-otlp.md). It returns the
// base URL.
func otlpPrometheus(t *testing.T) string {
	t.Helper()
	bin := prometheus3Binary(t)
	dir := t.TempDir()
	files := map[string]string{
		"prometheus.yml": "otlp:\n  promote_resource_attributes: [host.name, nbs.tenant]\n",
		"web.yml":        fmt.Sprintf("basic_auth_users:\n  %s: %s\n", otlpPromUser, otlpPromHash),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--web.config.file="+filepath.Join(dir, "web.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--web.enable-otlp-receiver", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/-/ready", nil)
		req.SetBasicAuth(otlpPromUser, otlpPromPassword)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s: %s", out.String())
		}
	}
}

// promSeries is one series Prometheus holds and its raw samples.
type promSeries struct {
	labels  map[string]string
	samples map[int64]float64 // Unix milliseconds → value
}

// promRaw returns every series Prometheus holds, with every sample of the
// last hour before at, keyed by its labels.
func promRaw(t *testing.T, base string, at time.Time) map[string]promSeries {
	t.Helper()
	q := url.Values{"query": {`{__name__=~".+"}[1h]`}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/query?"+q.Encode(), nil)
	req.SetBasicAuth(otlpPromUser, otlpPromPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		t.Fatalf("query Prometheus: HTTP %d %v %s", resp.StatusCode, err, body)
	}
	out := map[string]promSeries{}
	for _, s := range r.Data.Result {
		ps := promSeries{labels: s.Metric, samples: map[int64]float64{}}
		for _, v := range s.Values {
			ts, _ := v[0].(float64)
			val, err := strconv.ParseFloat(v[1].(string), 64)
			if err != nil {
				t.Fatalf("sample %v of %v: %v", v, s.Metric, err)
			}
			ps.samples[int64(ts*1000+0.5)] = val
		}
		out[labelKey(s.Metric)] = ps
	}
	return out
}

// otlpRequests is Prometheus's count of the OTLP requests it answered 2xx.
func otlpRequests(t *testing.T, base string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.SetBasicAuth(otlpPromUser, otlpPromPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	n := 0
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "prometheus_http_requests_total{") && strings.Contains(line, `code="2`) && strings.Contains(line, `handler="/api/v1/otlp/v1/metrics"`) {
			f := strings.Fields(line)
			v, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				t.Fatalf("Prometheus's /metrics: %q: %v", line, err)
			}
			n += v
		}
	}
	return n
}

func labelKey(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		fmt.Fprintf(&b, "%s=%q,", k, l[k])
	}
	return b.String()
}

// promLabels is where a scrape's series lands in Prometheus through OTLP
// (docs/export-otlp.md): node is the Resource's service.instance.id and
// host.name (instance and, promoted, host_name), tenant is nbs.tenant
// (promoted: nbs_tenant), service.name is job, every other label is
// itself — plus the semantic convention attributes the test names in
// extra.
func promLabels(name string, m *dto.Metric, extra map[string]map[string]string) map[string]string {
	out := map[string]string{"__name__": name, "job": otlp.ServiceName}
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "node":
			out["instance"], out["host_name"] = l.GetValue(), l.GetValue()
		case "tenant":
			out["nbs_tenant"] = l.GetValue()
		default:
			out[l.GetName()] = l.GetValue()
		}
	}
	for label, add := range extra {
		k, v, _ := strings.Cut(label, "=")
		if out[k] == v {
			maps.Copy(out, add)
		}
	}
	return out
}

// A small real fleet's export pushed twice over OTLP lands in a real
// Prometheus 3 as exactly the scrape's series — every name, label and
// value, each counter's increase between the pushes — with the semantic
// convention attributes beside them, the node in target_info; a receiver
// that refuses (401, 404) is a permanent error, one that cannot be reached
// is not; and a node's request split to fit a small size limit arrives
// whole.
func TestOTLPExportLandsInPrometheusAsTheScrape(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The database first: under -short it skips before Prometheus builds.
	db := pgcluster.Database(t)
	prom := otlpPrometheus(t)
	col := startCollector(t, db, "127.0.0.1:0")

	// Two raw agents: one of tenant acme, with an owner that is a pod,
	// a ping target named by its address, a device and a protocol; one of
	// no tenant, with a metric no family names.
	def := func(id, unit string, kind nbsv1.MetricKind, q float64) *nbsv1.MetricDefinition {
		return &nbsv1.MetricDefinition{Id: id, Title: id, Unit: unit, Kind: kind, Quantile: q}
	}
	rate, gauge, hist := nbsv1.MetricKind_METRIC_KIND_RATE, nbsv1.MetricKind_METRIC_KIND_GAUGE, nbsv1.MetricKind_METRIC_KIND_HISTOGRAM
	// Children are exported while raised: below a root that is not OK.
	warn := func(s *nbsv1.Sample) *nbsv1.Sample { s.State = nbsv1.State_STATE_WARN; return s }
	a := &tenantAgent{t: t, addr: col.grpcAddr, name: "otlp-a", ping: "198.18.0.1", extra: []*nbsv1.MetricDefinition{
		def("tcp_reset/sent/no_socket/pod:shop.cart-7d9f", "resets/s", rate, 0),
		def("drops", "packets/s", rate, 0),
		def("drops/conntrack", "events/s", rate, 0),
		def("drops/conntrack/usage", "%", gauge, 0),
		def("ping", "ms", gauge, 0),
		def("ping/10.0.0.7", "ms", hist, 0.99),
		def("ping/10.0.0.7/loss", "%", gauge, 0),
		def("latency", "events/s", rate, 0),
		def("latency/rx", "ms", hist, 0.99),
		def("latency/rx/stack", "ms", hist, 0.99),
		def("latency/rx/stack/udp", "ms", hist, 0.99),
	}}
	b := &tenantAgent{t: t, addr: col.grpcAddr, name: "otlp-b", ping: "198.18.0.2", extra: []*nbsv1.MetricDefinition{
		def("latency", "events/s", rate, 0),
		def("latency/qdisc", "ms", hist, 0.99),
		def("latency/qdisc/eth0", "ms", hist, 0.99),
		def("custom", "widgets", gauge, 0),
		def("custom/thing", "widgets", gauge, 0),
	}}
	// The operator binds otlp-a to tenant acme before it connects.
	if code, body := col.call(t, http.MethodPut, "/api/v1/nodes/otlp-a/labels", `{"labels":{"customer":"acme"}}`); code != http.StatusOK {
		t.Fatalf("bind otlp-a to acme: HTTP %d %s", code, body)
	}
	for _, ag := range []*tenantAgent{a, b} {
		if err := ag.connectWith("", map[string]string{"rack": "r1"}); err != nil {
			t.Fatalf("%s: connect: %v", ag.name, err)
		}
	}
	reportA := func(n float64) {
		a.seq++
		a.sendAcked(report(a.seq, sample("tcp_reset", n), sample("tcp_reset/sent", n), sample("tcp_reset/sent/no_socket", n),
			sample("tcp_reset/sent/no_socket/pod:shop.cart-7d9f", n), sample("drops", 2*n),
			warn(sample("drops/conntrack/usage", 81.5)), warn(sample("ping", 1.25)), warn(sample("ping/10.0.0.7", 1.25)),
			warn(sample("ping/10.0.0.7/loss", 12.5)), warn(sample("latency/rx/stack/udp", 0.4))))
	}
	reportB := func(n float64) {
		b.seq++
		b.sendAcked(report(b.seq, sample("tcp_reset", n), warn(sample("latency/qdisc/eth0", 3)), warn(sample("custom", 7)), warn(sample("custom/thing", 7))))
	}

	st, err := store.Open(ctx, db, testLogger(t, "export"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	cfg := export.DefaultConfig()
	cfg.CounterHold = 0 // the test compares what was exported, held or not
	ex := export.New(st, cfg)
	auth := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(otlpPromUser+":"+otlpPromPassword))}
	recv := export.Receiver{Name: "prom", Type: "otlp", URL: prom + "/api/v1/otlp/v1/metrics", Headers: auth}
	sender, err := otlp.New(recv)
	if err != nil {
		t.Fatal(err)
	}
	// The second push goes through a sender whose limit splits each node's
	// request in many.
	small, err := otlp.NewWith(recv, otlp.Options{MaxRequestBytes: 700, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}

	var snaps []export.Snapshot
	for i, s := range []export.Sender{sender, small} {
		reportA(float64(3 + i))
		reportB(float64(5 + i))
		snap, err := ex.Gather(ctx, store.All{})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !snap.Now.After(snaps[i-1].Now) {
			t.Fatalf("the database's clock did not move between exports: %s, %s", snaps[i-1].Now, snap.Now)
		}
		before := otlpRequests(t, prom)
		if err := s.Send(ctx, snap); err != nil {
			t.Fatalf("push %d: %v", i+1, err)
		}
		// Prometheus's own count of the requests it took: one a node,
		// then many more when the limit split them.
		switch n := otlpRequests(t, prom) - before; {
		case i == 0 && n != 2:
			t.Errorf("push 1 took %d requests, want one a node (2)", n)
		case i == 1 && n <= 4:
			t.Errorf("push 2, limited to 700 bytes a request, took %d requests: not split", n)
		default:
			t.Logf("push %d: %d requests", i+1, n)
		}
		snaps = append(snaps, snap)
	}

	// What the scrape holds, as Prometheus should hold it.
	extra := map[string]map[string]string{
		`owner=pod:shop.cart-7d9f`: {"k8s_namespace_name": "shop", "k8s_pod_name": "cart-7d9f"},
		`target=10.0.0.7`:          {"network_peer_address": "10.0.0.7"},
		`device=eth0`:              {"network_interface_name": "eth0"},
		`protocol=udp`:             {"network_transport": "udp"},
	}
	want := map[string]promSeries{}
	counters := map[string]bool{}
	for _, snap := range snaps {
		for _, mf := range snap.Families {
			for _, m := range mf.GetMetric() {
				l := promLabels(mf.GetName(), m, extra)
				k := labelKey(l)
				s, ok := want[k]
				if !ok {
					s = promSeries{labels: l, samples: map[int64]float64{}}
					want[k] = s
				}
				v := m.GetGauge().GetValue()
				if mf.GetType() == dto.MetricType_COUNTER {
					v, counters[k] = m.GetCounter().GetValue(), true
				}
				s.samples[snap.Now.UnixMilli()] = v
			}
		}
	}
	// The fleet is what the test made: both nodes, a tenant, every kind.
	for _, must := range []map[string]string{
		{"__name__": "nbs_tcp_resets_by_owner_total", "instance": "otlp-a", "nbs_tenant": "acme", "owner": "pod:shop.cart-7d9f", "k8s_pod_name": "cart-7d9f"},
		{"__name__": "nbs_ping_rtt_seconds", "instance": "otlp-a", "network_peer_address": "10.0.0.7", "quantile": "0.99"},
		{"__name__": "nbs_ping_loss_ratio", "instance": "otlp-a"},
		{"__name__": "nbs_conntrack_usage_ratio", "instance": "otlp-a"},
		{"__name__": "nbs_drops_packets_total", "instance": "otlp-a"},
		{"__name__": "nbs_rx_latency_seconds", "instance": "otlp-a", "network_transport": "udp"},
		{"__name__": "nbs_qdisc_latency_seconds", "instance": "otlp-b", "network_interface_name": "eth0"},
		{"__name__": "nbs_tree_value", "instance": "otlp-b", "path": "custom/thing"},
		{"__name__": "nbs_node_last_report_timestamp_seconds", "instance": "otlp-b"},
		{"__name__": "nbs_tcp_resets_total", "instance": "otlp-b"},
	} {
		if !slices.ContainsFunc(slices.Collect(maps.Values(want)), func(s promSeries) bool {
			for k, v := range must {
				if s.labels[k] != v {
					return false
				}
			}
			return true
		}) {
			t.Errorf("the export holds no series %v", must)
		}
	}

	got := promRaw(t, prom, snaps[1].Now.Add(time.Second))
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("Prometheus has no series %s", k)
			continue
		}
		if !maps.Equal(g.samples, w.samples) {
			t.Errorf("%s: Prometheus holds %v, the export %v", k, g.samples, w.samples)
		}
		if counters[k] && len(w.samples) == 2 {
			t0, t1 := snaps[0].Now.UnixMilli(), snaps[1].Now.UnixMilli()
			if gi, wi := g.samples[t1]-g.samples[t0], w.samples[t1]-w.samples[t0]; gi != wi {
				t.Errorf("%s: increase %v in Prometheus, %v exported", k, gi, wi)
			}
		}
	}
	var info []map[string]string
	for k, g := range got {
		if g.labels["__name__"] == "target_info" {
			info = append(info, g.labels)
			continue
		}
		if _, ok := want[k]; !ok {
			t.Errorf("Prometheus has a series the export does not: %s", k)
		}
	}
	// The node, as a Resource: one target_info each.
	slices.SortFunc(info, func(x, y map[string]string) int { return strings.Compare(x["instance"], y["instance"]) })
	if len(info) != 2 || info[0]["instance"] != "otlp-a" || info[0]["job"] != "nbs-agent" || info[0]["host_name"] != "otlp-a" ||
		info[0]["nbs_tenant"] != "acme" || info[0]["service_version"] != "test" || info[1]["instance"] != "otlp-b" || info[1]["nbs_tenant"] != "" {
		t.Errorf("target_info: %v; want one per node, with its tenant and agent version", info)
	}
	var counted int
	for k := range want {
		if counters[k] {
			counted++
		}
	}
	t.Logf("%d series (%d counters) in two pushes, all in Prometheus", len(want), counted)

	// A retried push sends the same samples again: Prometheus takes them
	// as duplicates. An older export after a newer one is out of order:
	// refused, permanently, in a message of bounded size (Prometheus
	// names each sample).
	if err := sender.Send(ctx, snaps[1]); err != nil {
		t.Errorf("the same export again: %v", err)
	}
	if err := sender.Send(ctx, snaps[0]); !export.IsPermanent(err) || !strings.Contains(err.Error(), "out of order") || len(err.Error()) > 2000 {
		t.Errorf("an older export after a newer: %v (%d bytes); want a permanent error of at most 2000 bytes saying out of order", err, len(fmt.Sprint(err)))
	}

	// Refusals: without the receiver's credentials (401), at a path it
	// does not serve (404) — permanent; a receiver that is down — retried.
	for _, tc := range []struct {
		name      string
		r         export.Receiver
		permanent bool
	}{
		{"no credentials", export.Receiver{Name: "x", URL: prom + "/api/v1/otlp/v1/metrics"}, true},
		{"wrong path", export.Receiver{Name: "x", URL: prom + "/api/v1/otlp/v1/nothing", Headers: auth}, true},
		{"down", export.Receiver{Name: "x", URL: "http://" + freeAddr(t) + "/api/v1/otlp/v1/metrics", Timeout: 5 * time.Second}, false},
	} {
		s, err := otlp.New(tc.r)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(ctx, snaps[1])
		if err == nil || export.IsPermanent(err) != tc.permanent {
			t.Errorf("%s: error %v, permanent %v; want an error, permanent %v", tc.name, err, export.IsPermanent(err), tc.permanent)
		}
	}
}
