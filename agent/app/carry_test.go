package app

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/nbs-project/nbs/agent/spool"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// What a restarted agent takes as reported, for each way the previous one
// can have stopped around giving a report to the outbox.
func TestCarryRestore(t *testing.T) {
	before := map[string]uint64{"tcp_reset": 10}
	after := map[string]uint64{"tcp_reset": 17}
	const reportTime = 1_700_000_000_000_000_000
	tests := []struct {
		name string
		// stop says how far the previous agent got with the report made
		// at reportTime; it returns the node the next agent runs as.
		stop func(c *carry, out *spool.Spool) string
		want map[string]uint64
	}{
		{"first start", func(*carry, *spool.Spool) string { return "n" }, nil},
		{"report taken and recorded", func(c *carry, out *spool.Spool) string {
			c.pending(reportTime, after)
			out.Add(&nbsv1.Report{TimeUnixNano: reportTime})
			c.commit()
			return "n"
		}, after},
		{"killed after the outbox took it", func(c *carry, out *spool.Spool) string {
			c.pending(reportTime, after)
			out.Add(&nbsv1.Report{TimeUnixNano: reportTime})
			return "n"
		}, after},
		{"killed before the outbox took it", func(c *carry, _ *spool.Spool) string {
			c.pending(reportTime, after)
			return "n"
		}, before},
		{"another node's record", func(c *carry, out *spool.Spool) string {
			c.pending(reportTime, after)
			out.Add(&nbsv1.Report{TimeUnixNano: reportTime})
			c.commit()
			return "m"
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			log := slog.New(slog.DiscardHandler)
			out, err := spool.Open(spool.Options{Dir: dir, Node: "n"})
			if err != nil {
				t.Fatal(err)
			}
			c := newCarry(dir, "n", log)
			c.start(before)
			node := tt.stop(c, out)
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
			out, err = spool.Open(spool.Options{Dir: dir, Node: "n"})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			if tt.name == "first start" {
				if err := os.Remove(filepath.Join(dir, carryName)); err != nil {
					t.Fatal(err)
				}
			}
			got := newCarry(dir, node, log).restore(out)
			if !maps.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("restored %v, want %v", got, tt.want)
			}
		})
	}
	// A spool in memory keeps no record.
	if got := newCarry("", "n", slog.New(slog.DiscardHandler)).restore(nil); got != nil {
		t.Errorf("in memory: restored %v, want nil", got)
	}
}

// The baseline of a continuing counter is what was reported of it (0 for
// one never reported); of any other, the first reading.
func TestBaselineContinues(t *testing.T) {
	led := newLedger()
	led.baseline(reading{
		counters:  map[string]uint64{"tcp_reset": 30, "tcp_reset/sent/new": 4, "ping/x/sent": 9},
		continued: map[string]bool{"tcp_reset": true, "tcp_reset/sent/new": true},
	}, map[string]uint64{"tcp_reset": 21, "ping/x/sent": 100})
	want := map[string]uint64{"tcp_reset": 21, "tcp_reset/sent/new": 0, "ping/x/sent": 9}
	if !maps.Equal(led.counters, want) {
		t.Errorf("baseline %v, want %v", led.counters, want)
	}
	led = newLedger()
	led.baseline(reading{counters: map[string]uint64{"tcp_reset": 30}, continued: map[string]bool{"tcp_reset": true}}, nil)
	if led.counters["tcp_reset"] != 30 {
		t.Errorf("without a record: baseline %v, want the reading's 30", led.counters)
	}
}
