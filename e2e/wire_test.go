package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/agent/uplink"
	collectorapp "github.com/nbs-project/nbs/collector/app"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/wire"
	"github.com/nbs-project/nbs/internal/wire/wiretest"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The agent cuts reports to internal/wire's limits without asking its
// collector; that is only safe while the collector's defaults are those
// limits. A report over every one of them goes, as the agent sends it, to
// the collector's ingest server configured as the collector is by default,
// and every part must pass its validation and be stored.
func TestSplitReportPassesTheCollectorsDefaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// announced describes the metrics the Hello announces.
		announced func(r *nbsv1.Report) []*nbsv1.MetricDefinition
		// recorded are the definitions the spool keeps with the report,
		// and charges each part for.
		recorded func(id string) (*nbsv1.MetricDefinition, bool)
	}{
		// As after an agent restart: each part carries the definitions of
		// its metrics, and its bytes bind before most counts.
		{"definitions on the stream", announceRoots, wiretest.Definition},
		// Nothing to attach: every count binds.
		{"definitions in the Hello", announceAll, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := collectorapp.DefaultConfig()
			limits := cfg.Ingest.Limits
			// By default a node has no more metrics than a report may carry
			// samples, so a report a default collector takes never has too
			// many; room for more metrics lets this one exceed that limit too.
			limits.MaxMetrics = 2 * limits.MaxSamples
			r := wiretest.Oversized(time.Now())
			if len(r.Samples) <= limits.MaxSamples || len(r.Histograms) <= limits.MaxHistograms || len(r.Events) <= limits.MaxEvents ||
				proto.Size(r) <= cfg.Ingest.MaxMsgSize {
				t.Fatalf("test report of %d samples, %d histograms, %d events, %d bytes is within the collector's defaults",
					len(r.Samples), len(r.Histograms), len(r.Events), proto.Size(r))
			}

			log := testLogger(t, "collector")
			m := telemetry.New()
			stored := &storedReports{}
			writer := ingest.NewWriter(stored, ingest.DefaultWriterOptions(), log, m)
			srv := ingest.NewServer(&openRegistry{}, writer, ingest.ServerOptions{Limits: limits}, log, m)
			gs := grpc.NewServer(grpc.MaxRecvMsgSize(cfg.Ingest.MaxMsgSize))
			nbsv1.RegisterAgentServiceServer(gs, srv)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = gs.Serve(lis) }()
			t.Cleanup(gs.Stop)

			sp, err := spool.Open(spool.Options{Describe: c.recorded, Logger: testLogger(t, "spool")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sp.Close() })
			sp.Add(proto.Clone(r).(*nbsv1.Report))
			parts := sp.Len()

			hello := &nbsv1.Hello{NodeName: "split", InstanceId: sp.Instance(), IntervalMs: 1000, Metrics: c.announced(r)}
			up := uplink.New(uplink.Options{Address: lis.Addr().String(), MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
				sp, describingAgent{hello}, testLogger(t, "uplink"))
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { writer.Run(ctx) })
			wg.Go(func() { _ = up.Run(ctx) })
			defer func() { cancel(); wg.Wait() }()
			eventually(t, 30*time.Second, func() string {
				if n := sp.Len(); n > 0 {
					return fmt.Sprintf("%d of %d parts neither acked nor rejected", n, parts)
				}
				return ""
			})

			if sp.Dropped() != 0 {
				t.Fatalf("%d entries dropped: the collector rejected parts (see its log)", sp.Dropped())
			}
			reports, samples, histograms, events := stored.count()
			if reports != parts || samples != len(r.Samples) || histograms != len(r.Histograms) || events != len(r.Events) {
				t.Fatalf("stored %d reports with %d samples, %d histograms, %d events; want %d, %d, %d, %d",
					reports, samples, histograms, events, parts, len(r.Samples), len(r.Histograms), len(r.Events))
			}
		})
	}
}

func announceRoots(*nbsv1.Report) []*nbsv1.MetricDefinition {
	var out []*nbsv1.MetricDefinition
	for _, root := range []string{wiretest.RootRate, wiretest.RootHistogram} {
		d, _ := wiretest.Definition(root)
		out = append(out, d)
	}
	return out
}

// announceAll announces every metric of r, without the descriptions that
// would take the Hello over the message size.
func announceAll(r *nbsv1.Report) []*nbsv1.MetricDefinition {
	out := announceRoots(r)
	seen := map[string]bool{wiretest.RootRate: true, wiretest.RootHistogram: true}
	for _, id := range wire.MetricIDs(r) {
		if seen[id] {
			continue
		}
		seen[id] = true
		d, _ := wiretest.Definition(id)
		d.Description = ""
		out = append(out, d)
	}
	return out
}

// describingAgent describes every metric of a wiretest report.
type describingAgent struct{ hello *nbsv1.Hello }

func (a describingAgent) Hello() *nbsv1.Hello { return a.hello }
func (describingAgent) Definition(id string) (*nbsv1.MetricDefinition, bool) {
	return wiretest.Definition(id)
}
func (describingAgent) ApplyConfig(*nbsv1.Config) {}

// openRegistry admits every node and gives every metric an id, as an empty
// database would.
type openRegistry struct {
	mu  sync.Mutex
	ids map[string]int32
}

func (r *openRegistry) idsOf(paths []string) map[string]int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = map[string]int32{}
	}
	out := make(map[string]int32, len(paths))
	for _, p := range paths {
		if r.ids[p] == 0 {
			r.ids[p] = int32(len(r.ids) + 1)
		}
		out[p] = r.ids[p]
	}
	return out
}

func (r *openRegistry) UpsertDefinitions(_ context.Context, _ int32, defs []store.MetricDef) (map[string]int32, error) {
	paths := make([]string, len(defs))
	for i, d := range defs {
		paths[i] = d.Path
	}
	return r.idsOf(paths), nil
}
func (*openRegistry) AdmitNodes(_ context.Context, names []string, _, _ int) ([]bool, []bool, int, error) {
	ok := make([]bool, len(names))
	for i := range ok {
		ok[i] = true
	}
	return ok, make([]bool, len(names)), 0, nil
}
func (r *openRegistry) RegisterNodes(_ context.Context, regs []store.Registration, _ int) []store.Registered {
	out := make([]store.Registered, len(regs))
	for i, g := range regs {
		paths := make([]string, len(g.Defs))
		for k, d := range g.Defs {
			paths[k] = d.Path
		}
		out[i] = store.Registered{ID: 1, IDs: r.idsOf(paths)}
	}
	return out
}

// storedReports stands in for PostgreSQL: it keeps every report the
// collector accepted.
type storedReports struct {
	mu      sync.Mutex
	reports []store.Report
}

func (s *storedReports) WriteReportsInto(_ context.Context, reports []store.Report, inserted map[store.ReportKey]bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(inserted)
	for _, r := range reports {
		// A copy: the collector fills a report's arrays again once it
		// is stored (ingest.ReportWriter).
		r.Samples, r.Histograms = slices.Clone(r.Samples), slices.Clone(r.Histograms)
		s.reports = append(s.reports, r)
		inserted[r.Key()] = true
	}
	return nil
}

func (s *storedReports) count() (reports, samples, histograms, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reports {
		samples += len(r.Samples)
		histograms += len(r.Histograms)
		events += len(r.Events)
	}
	return len(s.reports), samples, histograms, events
}
