package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"math"
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
// ping/gw/loss, with every echo lost: its ping root has no value (an
// agent sends none then, never 0 ms). Their interval is an hour, so they
// stay current for the
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
		ping := store.Sample{MetricID: mids["ping"], Path: "ping", Value: 1.2, State: state}
		if state != store.StateOK {
			ping.Value, ping.NoValue = 0, true
		}
		s := []store.Sample{{MetricID: mids["agent"], Path: "agent", Value: 0.3, State: store.StateOK}, ping,
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
	seedLonePoint(ctx, t, st, defs)
	t.Logf("seeded %d simulated nodes in %s", n, time.Since(start).Round(time.Millisecond))
}

// seedLonePoint registers lone-1 (customer=sim), a node that reported its
// ping root every 10 s for the last 20 minutes but for a gap of three
// minutes with one report in the middle of it: a point its chart cannot
// join to any other, which must show as a marker, not a speck.
func seedLonePoint(ctx context.Context, t *testing.T, st *store.Store, defs []store.MetricDef) {
	t.Helper()
	const interval = 10 * time.Second
	id, err := st.UpsertNode(ctx, store.Node{Name: "lone-1", InstanceID: 1, IntervalMS: uint32(interval.Milliseconds()),
		AgentVersion: "simulated", KernelRelease: "6.18", Labels: map[string]string{"customer": "sim", "rack": "r0"}})
	if err != nil {
		t.Fatalf("seed lone-1: %v", err)
	}
	mids, err := st.UpsertDefinitions(ctx, id, defs)
	if err != nil {
		t.Fatalf("seed lone-1: %v", err)
	}
	now := time.Now().Truncate(interval)
	gapFrom, lone, gapTo := now.Add(-10*time.Minute), now.Add(-8*time.Minute-30*time.Second), now.Add(-7*time.Minute)
	var reports []store.Report
	seq := uint64(0)
	for at := now.Add(-20 * time.Minute); at.Before(now.Add(-time.Minute)); at = at.Add(interval) {
		if !at.Before(gapFrom) && at.Before(gapTo) && !at.Equal(lone) {
			continue
		}
		seq++
		v := 2 + math.Sin(float64(seq)/6)
		reports = append(reports, store.Report{NodeID: id, InstanceID: 1, Seq: seq, Time: at, IntervalMS: uint32(interval.Milliseconds()),
			Samples: []store.Sample{{MetricID: mids["ping"], Path: "ping", Value: v, State: store.StateOK}}})
	}
	if _, err := st.WriteReports(ctx, reports); err != nil {
		t.Fatalf("seed lone-1's reports: %v", err)
	}
}
