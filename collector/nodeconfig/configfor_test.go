package nodeconfig

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// ConfigFor looks up only the node's metrics that have an override, and
// the configs computed at once share their reads of the overrides, each
// still seeing every override stored before it asked.
func TestConfigForReadsWhatItNeeds(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	var err error
	svc := New(st, slog.New(slog.DiscardHandler))
	n := store.Node{Name: "web-1", InstanceID: 1, IntervalMS: 1000}
	if n.ID, err = st.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertDefinitions(ctx, n.ID, []store.MetricDef{
		{Path: "tcp_reset", Kind: store.KindRate}, {Path: "tcp_reset/sent", Kind: store.KindRate}, {Path: "tcp_retrans", Kind: store.KindRate},
	}); err != nil {
		t.Fatal(err)
	}
	config := func() string {
		t.Helper()
		cfg, err := svc.ConfigFor(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		var thr []string
		for m := range cfg.GetThresholds() {
			thr = append(thr, m)
		}
		return fmt.Sprint(thr, cfg.GetDisabledThresholds())
	}
	if got := config(); got != "[] []" {
		t.Errorf("no overrides: %s", got)
	}
	thr := &store.Threshold{Warn: 1, Crit: 2, Comparison: "above", HoldIntervals: 1}
	for _, o := range []Override{
		{Scope: Scope{Kind: "global"}, Metric: "tcp_reset", Threshold: thr},
		{Scope: Scope{Kind: "global"}, Metric: "tcp_reset/sent", Disabled: true},
		{Scope: Scope{Kind: "global"}, Metric: "udp_drop", Threshold: thr}, // not the node's
	} {
		if _, err := svc.repo.put(ctx, o, 100); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := config(), "[tcp_reset] [tcp_reset/sent]"; got != want {
		t.Errorf("config %s, want %s", got, want)
	}
	// Stored just before it asks: seen, though a read was shared just now.
	if _, err := svc.repo.put(ctx, Override{Scope: Scope{Kind: "node", Node: "web-1"}, Metric: "tcp_retrans", Disabled: true}, 100); err != nil {
		t.Fatal(err)
	}
	if got, want := config(), "[tcp_reset] [tcp_reset/sent tcp_retrans]"; got != want {
		t.Errorf("config after a new override %s, want %s", got, want)
	}

	svc.shared.mu.Lock()
	before := svc.shared.reads
	svc.shared.mu.Unlock()
	const hellos = 64
	var wg sync.WaitGroup
	got := make([]string, hellos)
	for i := range hellos {
		wg.Go(func() {
			cfg, err := svc.ConfigFor(ctx, n)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = fmt.Sprint(len(cfg.GetThresholds()), cfg.GetDisabledThresholds())
		})
	}
	wg.Wait()
	for i, g := range got {
		if g != "1 [tcp_reset/sent tcp_retrans]" {
			t.Errorf("config %d at once: %s", i, g)
		}
	}
	svc.shared.mu.Lock()
	reads := svc.shared.reads - before
	svc.shared.mu.Unlock()
	if reads >= hellos {
		t.Errorf("%d configs at once read the overrides %d times, want the reads shared", hellos, reads)
	}
	t.Logf("%d configs at once, %d reads of the overrides", hellos, reads)
}
