package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// defaultFleetNodes is how many simulated nodes the browser's fleet holds
// beside the lab's two: the operator's fleet page is tried at the size it
// is meant for (NBS_E2E_FLEET_NODES changes it; 0 seeds none).
const defaultFleetNodes = 10000

func fleetSize(t *testing.T) int {
	s := os.Getenv("NBS_E2E_FLEET_NODES")
	if s == "" {
		return defaultFleetNodes
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("NBS_E2E_FLEET_NODES=%q: want a number of nodes", s)
	}
	return n
}

// seedFleet registers n simulated nodes sim-1…sim-n (customer=sim, so no
// customer token of the test sees them) straight into the collector's
// store, each with a small tree and one report, as an agent's Hello and
// first report would leave them. Every 50th is WARN on ping, explained by
// ping/gw/loss. Their interval is an hour, so they stay current for the
// whole run without reporting again (they are marked disconnected: they
// have no stream).
func seedFleet(t *testing.T, dbURL string, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	ctx := context.Background()
	start := time.Now()
	st, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open the store to seed the fleet: %v", err)
	}
	defer st.Close()
	defs := []store.MetricDef{
		{Path: "agent", Title: "Agent overhead", Unit: "% of a CPU", Kind: store.KindGauge, Scale: 1},
		{Path: "ping", Title: "Round-trip time to peers", Unit: "ms", Kind: store.KindGauge, Scale: 1},
		{Path: "ping/gw", Title: "Round-trip time to the gateway", Unit: "ms", Kind: store.KindGauge, Scale: 1},
		{Path: "ping/gw/loss", Title: "Pings to the gateway lost", Unit: "pings/s", Kind: store.KindRate, Scale: 1},
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate, Scale: 1},
	}
	const interval = time.Hour
	batch := make([]store.Report, 0, 500)
	flush := func() {
		if _, err := st.WriteReports(ctx, batch); err != nil {
			t.Fatalf("seed the fleet's reports: %v", err)
		}
		batch = batch[:0]
	}
	at := time.Now().Add(-time.Minute)
	for i := 1; i <= n; i++ {
		id, err := st.UpsertNode(ctx, store.Node{Name: fmt.Sprintf("sim-%d", i), InstanceID: 1, IntervalMS: uint32(interval.Milliseconds()),
			AgentVersion: "simulated", KernelRelease: "6.18", Labels: map[string]string{"customer": "sim", "rack": fmt.Sprintf("r%d", i%10)}})
		if err != nil {
			t.Fatalf("seed the fleet: %v", err)
		}
		mids, err := st.UpsertDefinitions(ctx, id, defs)
		if err != nil {
			t.Fatalf("seed the fleet: %v", err)
		}
		state := store.StateOK
		if i%50 == 0 {
			state = store.StateWarn
		}
		s := []store.Sample{{MetricID: mids["agent"], Path: "agent", Value: 0.3, State: store.StateOK},
			{MetricID: mids["ping"], Path: "ping", Value: 1.2, State: state},
			{MetricID: mids["tcp_reset"], Path: "tcp_reset", Value: 0, State: store.StateOK}}
		if state != store.StateOK {
			s = append(s, store.Sample{MetricID: mids["ping/gw"], Path: "ping/gw", Value: 1.2, State: state},
				store.Sample{MetricID: mids["ping/gw/loss"], Path: "ping/gw/loss", Value: 1800, State: state})
		}
		batch = append(batch, store.Report{NodeID: id, InstanceID: 1, Seq: 1, Time: at, IntervalMS: uint32(interval.Milliseconds()), Samples: s})
		if len(batch) == cap(batch) {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	t.Logf("seeded %d simulated nodes in %s", n, time.Since(start).Round(time.Millisecond))
}
