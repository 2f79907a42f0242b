package ingest

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// tenantsGuard knows which tenant each node name has, as
// nodeconfig.Service does from the fleet.
type tenantsGuard map[string]string

func (g tenantsGuard) ForeignPingTargets(_ context.Context, node store.Node, targets []PingTarget) ([]string, error) {
	var out []string
	for _, t := range targets {
		if tn, ok := g[t.Name]; ok && tn != node.Tenant {
			out = append(out, t.ID)
		}
	}
	return out, nil
}

// A Hello's ping targets naming another tenant's node are not registered:
// nothing under them, and nothing else is lost.
func TestHelloLeavesOutForeignPingTargets(t *testing.T) {
	guard := tenantsGuard{"acme-2": "acme", "globex-db-1": "globex"}
	srv, reg, client := startServerWith(t, ServerOptions{Auth: credentialAuth{}, PingGuard: guard})
	reg.defs = map[string][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	def := func(id string, kind nbsv1.MetricKind) *nbsv1.MetricDefinition {
		return &nbsv1.MetricDefinition{Id: id, Title: id, Kind: kind}
	}
	h := &nbsv1.Hello{NodeName: "acme-1", InstanceId: 1, IntervalMs: 1000, Labels: map[string]string{"customer": "acme"}, Auth: cred("cred-acme-1"),
		Metrics: []*nbsv1.MetricDefinition{def("ping", nbsv1.MetricKind_METRIC_KIND_GAUGE), def("ping/clock", nbsv1.MetricKind_METRIC_KIND_GAUGE),
			def("ping/acme-2", nbsv1.MetricKind_METRIC_KIND_HISTOGRAM), def("ping/acme-2/loss", nbsv1.MetricKind_METRIC_KIND_GAUGE),
			def("ping/globex-db-1", nbsv1.MetricKind_METRIC_KIND_HISTOGRAM), def("ping/globex-db-1/loss", nbsv1.MetricKind_METRIC_KIND_GAUGE),
			def("ping/gw", nbsv1.MetricKind_METRIC_KIND_HISTOGRAM)}}
	if err := s.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: h}}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || m.GetConfig() == nil {
		t.Fatalf("hello: %v, %v; want the Config", m, err)
	}
	got := reg.defs["acme-1"]
	slices.Sort(got)
	if want := []string{"ping", "ping/acme-2", "ping/acme-2/loss", "ping/clock", "ping/gw"}; !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v (globex-db-1's subtree left out)", got, want)
	}
	if n := srv.catalogues.len(); n != 1 {
		t.Errorf("%d catalogues held, want the one registered (the Hello's own released)", n)
	}
}

// What a report says of a foreign target goes, the rest stays.
func TestStripForeign(t *testing.T) {
	r := &nbsv1.Report{
		NewMetrics: []*nbsv1.MetricDefinition{{Id: "ping/globex-db-1"}, {Id: "ping/globex-db-1/loss"}, {Id: "ping/acme-2"}},
		Samples:    []*nbsv1.Sample{{MetricId: "ping"}, {MetricId: "ping/globex-db-1"}, {MetricId: "ping/globex-db-1/loss"}, {MetricId: "ping/globex-db-10"}},
		Histograms: []*nbsv1.Histogram{{MetricId: "ping/globex-db-1"}, {MetricId: "ping/acme-2"}},
		Events:     []*nbsv1.Event{{MetricId: "ping/globex-db-1/loss"}, {MetricId: "tcp_reset"}},
	}
	if n := stripForeign(r, []string{"ping/globex-db-1"}); n != 6 {
		t.Errorf("stripped %d entries, want 6", n)
	}
	var left []string
	for _, d := range r.NewMetrics {
		left = append(left, "def "+d.GetId())
	}
	for _, x := range r.Samples {
		left = append(left, "sample "+x.GetMetricId())
	}
	for _, x := range r.Histograms {
		left = append(left, "hist "+x.GetMetricId())
	}
	for _, x := range r.Events {
		left = append(left, "event "+x.GetMetricId())
	}
	if got, want := strings.Join(left, ","), "def ping/acme-2,sample ping,sample ping/globex-db-10,hist ping/acme-2,event tcp_reset"; got != want {
		t.Errorf("left %s, want %s", got, want)
	}
}

// A peer that moves to another tenant while a stream goes on: once a
// Config push says the peers changed, the next report says nothing more
// of it, and once it is back, the report says it again. A target refused
// before it was defined stays refused for the stream.
func TestReportsFollowPeersMovingTenant(t *testing.T) {
	guard := tenantsGuard{"acme-2": "acme", "acme-3": "acme", "globex-db-1": "globex"}
	m := telemetry.New()
	srv := NewServer(&countingRegistry{}, nil, ServerOptions{PingGuard: guard}, slog.New(slog.DiscardHandler), m)
	base := map[string]streamMetric{}
	for _, id := range []string{"ping", "ping/acme-2", "ping/acme-2/loss", "ping/acme-3"} {
		base[id] = streamMetric{}
	}
	st := &stream{node: store.Node{Name: "acme-1", Tenant: "acme"}, metrics: metricSet{base: base}}
	st.setForeign([]string{"ping/globex-db-1"}) // refused at its Hello
	report := func() []string {
		r := &nbsv1.Report{Samples: []*nbsv1.Sample{{MetricId: "ping"}, {MetricId: "ping/acme-2"}, {MetricId: "ping/acme-2/loss"},
			{MetricId: "ping/acme-3"}, {MetricId: "ping/globex-db-1"}}}
		if err := srv.guardReport(context.Background(), st, r); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range r.Samples {
			ids = append(ids, s.GetMetricId())
		}
		return ids
	}
	steps := []struct {
		name   string
		change func()
		push   bool
		want   []string
	}{
		{"before", func() {}, false, []string{"ping", "ping/acme-2", "ping/acme-2/loss", "ping/acme-3"}},
		{"acme-2 moved, no push yet", func() { guard["acme-2"] = "globex" }, false, []string{"ping", "ping/acme-2", "ping/acme-2/loss", "ping/acme-3"}},
		{"after the push", func() {}, true, []string{"ping", "ping/acme-3"}},
		{"the next report", func() {}, false, []string{"ping", "ping/acme-3"}},
		{"back, and globex-db-1 joined acme", func() { guard["acme-2"], guard["globex-db-1"] = "acme", "acme" }, true,
			[]string{"ping", "ping/acme-2", "ping/acme-2/loss", "ping/acme-3"}},
	}
	for _, s := range steps {
		s.change()
		if s.push {
			st.recheckPing.Store(true)
		}
		if got := report(); !slices.Equal(got, s.want) {
			t.Errorf("%s: the report keeps %v, want %v", s.name, got, s.want)
		}
	}
}
