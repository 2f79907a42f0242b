package nodeconfig

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// A Config carries the overrides of the metrics its node has, and no others.
func TestThresholdsConfigOnlyForTheNodesMetrics(t *testing.T) {
	thr := &store.Threshold{Warn: 1, Crit: 2, Comparison: "above", HoldIntervals: 1}
	overrides := []Override{
		{ID: 1, Scope: Scope{Kind: "global"}, Metric: "tcp_reset", Threshold: thr},
		{ID: 2, Scope: Scope{Kind: "global"}, Metric: "tcp_reset/sent", Disabled: true},
		{ID: 3, Scope: Scope{Kind: "global"}, Metric: "udp_drop", Threshold: thr},
		{ID: 4, Scope: Scope{Kind: "global"}, Metric: "tcp_retrans", Disabled: true},
	}
	cfg := thresholdsConfig(Resolve(store.Node{Name: "web-1"}, overrides), map[string]bool{"tcp_reset": true, "tcp_reset/sent": true})
	if len(cfg.GetThresholds()) != 1 || cfg.GetThresholds()["tcp_reset"] == nil {
		t.Errorf("thresholds %v, want tcp_reset's alone", cfg.GetThresholds())
	}
	if got := fmt.Sprint(cfg.GetDisabledThresholds()); got != "[tcp_reset/sent]" {
		t.Errorf("disabled %s, want [tcp_reset/sent]", got)
	}
}

// thresholdEntryBytes bounds what one metric adds to a Config, with the
// longest id and the widest threshold.
func TestThresholdEntryBytesBoundsAnEntry(t *testing.T) {
	widest := &store.Threshold{Warn: -math.MaxFloat64, Crit: math.MaxFloat64, Comparison: "below",
		HoldIntervals: math.MaxUint32, BaselineIntervals: math.MaxUint32, Floor: math.MaxFloat64}
	var overrides []Override
	has := map[string]bool{}
	const n = 100
	for i := range n {
		id := fmt.Sprintf("%s%03d", strings.Repeat("m", schema.MaxIDLen-3), i)
		overrides = append(overrides, Override{ID: int64(i), Scope: Scope{Kind: "global"}, Metric: id, Threshold: widest})
		has[id] = true
	}
	size := proto.Size(thresholdsConfig(Resolve(store.Node{Name: "web-1"}, overrides), has))
	if bound := n * (schema.MaxIDLen + thresholdEntryBytes); size > bound {
		t.Errorf("%d widest entries take %d bytes, more than the bound %d", n, size, bound)
	}
}
