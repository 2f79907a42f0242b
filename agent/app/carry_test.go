package app

import (
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/agent/tree"
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
			c := newCarry(dir, "n", origin{}, log)
			c.start(before, nil)
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
			got := newCarry(dir, node, origin{}, log).restore(out).counted
			if !maps.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("restored %v, want %v", got, tt.want)
			}
		})
	}
	// A spool in memory keeps no record.
	if got := newCarry("", "n", origin{}, slog.New(slog.DiscardHandler)).restore(nil).counted; got != nil {
		t.Errorf("in memory: restored %v, want nil", got)
	}
}

// The file carry writes is the one its encoding of the values once per
// report must not change: carryFile as json.Marshal writes it, at each of
// its writes, for values with and without counters (an empty or nil set is
// omitted as pending, and recorded as counted as it was).
func TestCarryFileFormat(t *testing.T) {
	here := origin{Boot: "b00t", Netns: 4026531840}
	since := map[string]bool{"tcp/b": true, "tcp/a": true}
	for _, tt := range []struct {
		name              string
		start, report     map[string]uint64
		startSince, since map[string]bool
	}{
		{"counters", map[string]uint64{"tcp_reset": 10, "a<b&c": 1}, map[string]uint64{"tcp_reset": 17, "drops": 3}, nil, since},
		{"empty report", map[string]uint64{"tcp_reset": 10}, map[string]uint64{}, since, since},
		{"nil report", map[string]uint64{"tcp_reset": 10}, nil, since, nil},
		{"nothing at the start", nil, map[string]uint64{"tcp_reset": 1}, nil, since},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			c := newCarry(dir, "n", here, slog.New(slog.DiscardHandler))
			check := func(step string, want carryFile) {
				t.Helper()
				want.Node, want.BootID, want.Netns = "n", here.Boot, here.Netns
				want.SinceBoot = slices.Sorted(maps.Keys(c.sinceBoot))
				wantB, err := json.Marshal(want)
				if err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(dir, carryName))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(wantB) {
					t.Errorf("%s: wrote\n%s\nwant\n%s", step, got, wantB)
				}
			}
			c.start(tt.start, tt.startSince)
			check("start", carryFile{Counted: maps.Clone(tt.start)})
			c.sinceBoot = tt.since
			c.pending(1234, tt.report)
			check("pending", carryFile{Counted: maps.Clone(tt.start), Pending: maps.Clone(tt.report), PendingTime: 1234})
			if tt.report != nil {
				tt.report["later"] = 99 // the ledger's map goes on counting
			}
			c.commit()
			delete(tt.report, "later")
			check("commit", carryFile{Counted: maps.Clone(tt.report)})
		})
	}
}

// The baseline of a continuing counter is what was reported of it (0 for
// one never reported); of any other, the first reading.
func TestBaselineContinues(t *testing.T) {
	led := newLedger()
	led.baseline(reading{
		counters:  map[string]uint64{"tcp_reset": 30, "tcp_reset/sent/new": 4, "ping/x/sent": 9},
		continued: map[string]bool{"tcp_reset": true, "tcp_reset/sent/new": true},
	}, carried{counted: map[string]uint64{"tcp_reset": 21, "ping/x/sent": 100}}, origin{})
	want := map[string]uint64{"tcp_reset": 21, "tcp_reset/sent/new": 0, "ping/x/sent": 9}
	if !maps.Equal(led.counters, want) {
		t.Errorf("baseline %v, want %v", led.counters, want)
	}
	led = newLedger()
	led.baseline(reading{counters: map[string]uint64{"tcp_reset": 30}, continued: map[string]bool{"tcp_reset": true}}, carried{}, origin{})
	if led.counters["tcp_reset"] != 30 {
		t.Errorf("without a record: baseline %v, want the reading's 30", led.counters)
	}
}

// The kernel's own counters (/proc, since boot) continue the previous
// agent's only on the same boot and namespace, and only when they have not
// gone backwards; otherwise they count from this agent's start. The record
// goes through counted.json as the previous agent wrote it.
func TestKernelCountersContinue(t *testing.T) {
	const (
		overflows = "latency/listen/overflows"
		softnet   = "latency/softnet/dropped"
		retrans   = "latency/retransmits"
	)
	here := origin{Boot: "b1", Netns: 4026531840}
	// The previous agent reported these (kernel values since boot, but
	// retrans, which it counted by BPF).
	reported := map[string]uint64{overflows: 100, softnet: 7, retrans: 50}
	written := func(from origin) string {
		dir := t.TempDir()
		c := newCarry(dir, "n", from, slog.New(slog.DiscardHandler))
		c.start(reported, map[string]bool{overflows: true, softnet: true})
		return dir
	}
	// Now the kernel says: 130 overflows, softnet 9, and retransmits (now
	// from /proc) 400.
	now := map[string]uint64{overflows: 130, softnet: 9, retrans: 400}
	tests := []struct {
		name string
		dir  func() string
		cur  map[string]uint64 // the first reading, when not now
		// want is the first report's increase when the kernel has counted
		// 5 more of each.
		want      map[string]uint64
		why       string // a part of the note's reason
		backwards []string
	}{
		{"same boot and namespace", func() string { return written(here) }, nil,
			map[string]uint64{overflows: 35, softnet: 7, retrans: 5}, "", nil},
		{"another boot", func() string { return written(origin{Boot: "b0", Netns: here.Netns}) }, nil,
			map[string]uint64{overflows: 5, softnet: 5, retrans: 5}, "reboot", nil},
		{"another namespace", func() string { return written(origin{Boot: here.Boot, Netns: 1}) }, nil,
			map[string]uint64{overflows: 5, softnet: 5, retrans: 5}, "another namespace", nil},
		{"a counter went backwards", func() string { return written(here) }, map[string]uint64{overflows: 30, softnet: 9, retrans: 400},
			map[string]uint64{overflows: 5, softnet: 7, retrans: 5}, "", []string{overflows}},
		{"an older agent's file, without a boot id", func() string {
			dir := t.TempDir()
			b, err := json.Marshal(map[string]any{"node": "n", "counted": reported})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, carryName), b, 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}, nil, map[string]uint64{overflows: 5, softnet: 5, retrans: 5}, "did not record its boot", nil},
		{"no record", t.TempDir, nil, map[string]uint64{overflows: 5, softnet: 5, retrans: 5}, "no record", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir()
			out, err := spool.Open(spool.Options{Dir: dir, Node: "n"})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			cur := tt.cur
			if cur == nil {
				cur = now
			}
			first := reading{counters: maps.Clone(cur), sinceBoot: map[string]bool{overflows: true, softnet: true, retrans: true}}
			led := newLedger()
			note := led.baseline(first, newCarry(dir, "n", here, slog.New(slog.DiscardHandler)).restore(out), here)
			if !strings.Contains(note.why, tt.why) || (tt.why == "") != (note.why == "") {
				t.Errorf("note %+v, want the reason to say %q", note, tt.why)
			}
			if !slices.Equal(note.backwards, tt.backwards) {
				t.Errorf("backwards %v, want %v", note.backwards, tt.backwards)
			}
			next := reading{counters: map[string]uint64{}, sinceBoot: first.sinceBoot}
			for id, v := range cur {
				next.counters[id] = v + 5
			}
			r, _ := led.build(kernelTree(), time.Unix(1_700_000_000, 0), 10*time.Second, next, false)
			got := map[string]uint64{}
			for _, s := range r.GetSamples() {
				if _, ok := cur[s.GetMetricId()]; ok { // not the ancestors streamed for their state
					got[s.GetMetricId()] = uint64(s.GetValue())
				}
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("first report %v, want %v", got, tt.want)
			}
		})
	}
}

// A kernel counter first seen after the agent's start (its source failed
// the first reading) counts from there, never from boot; a pinned counter
// whose record is a kernel value (the previous agent read it from /proc)
// does not continue.
func TestKernelCounterFirstSeenLater(t *testing.T) {
	led := newLedger()
	led.baseline(reading{counters: map[string]uint64{"latency/retransmits": 8}, continued: map[string]bool{"latency/retransmits": true}},
		carried{counted: map[string]uint64{"latency/retransmits": 5000}, sinceBoot: map[string]bool{"latency/retransmits": true}}, origin{})
	if got := led.counters["latency/retransmits"]; got != 8 {
		t.Errorf("pinned counter recorded from /proc: baseline %d, want the reading's 8", got)
	}
	tr := kernelTree()
	now := time.Unix(1_700_000_000, 0)
	sb := map[string]bool{"latency/listen/overflows": true}
	for i, c := range []struct{ v, want uint64 }{{1000, 0}, {1004, 4}} {
		r, _ := led.build(tr, now.Add(time.Duration(i)*10*time.Second), 10*time.Second,
			reading{counters: map[string]uint64{"latency/listen/overflows": c.v}, sinceBoot: sb}, false)
		var got uint64
		for _, s := range r.GetSamples() {
			if s.GetMetricId() == "latency/listen/overflows" {
				got = uint64(s.GetValue())
			}
		}
		if got != c.want {
			t.Errorf("reading %d (%d): increase %d, want %d", i, c.v, got, c.want)
		}
	}
}

// kernelTree defines the counters the kernel tests report.
func kernelTree() *tree.Tree {
	t := tree.New()
	t.Define(
		catalog.Metric{ID: "latency", Kind: catalog.Rate},
		catalog.Metric{ID: "latency/listen", Kind: catalog.Rate},
		catalog.Metric{ID: "latency/listen/overflows", Kind: catalog.Rate},
		catalog.Metric{ID: "latency/softnet", Kind: catalog.Rate},
		catalog.Metric{ID: "latency/softnet/dropped", Kind: catalog.Rate},
		catalog.Metric{ID: "latency/retransmits", Kind: catalog.Rate},
	)
	return t
}
