package telemetry

import (
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// /metrics carries the runtime's estimate of the GC's CPU beside the
// process's: the GC share of the collector's CPU is read from them.
func TestMetricsCarryGCCPU(t *testing.T) {
	m := New()
	runtime.GC() // the runtime's CPU classes are updated by collections
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got := map[string]float64{}
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			got[name] = f
		}
	}
	for _, name := range []string{"go_cpu_classes_gc_total_cpu_seconds_total", "go_cpu_classes_gc_mark_idle_cpu_seconds_total",
		"go_cpu_classes_gc_pause_cpu_seconds_total", "process_cpu_seconds_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if got["go_cpu_classes_gc_total_cpu_seconds_total"] <= 0 {
		t.Errorf("go_cpu_classes_gc_total_cpu_seconds_total = %v after a collection, want > 0", got["go_cpu_classes_gc_total_cpu_seconds_total"])
	}
}
