package spool

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func open(t *testing.T, opts Options) *Spool {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// report has one root sample and, when children > 0, that many child
// samples, as many child events (each with a pad-byte field, to steer the
// size) and one child histogram.
func report(time int64, children, pad int) *nbsv1.Report {
	r := &nbsv1.Report{TimeUnixNano: time, IntervalMs: 1000,
		Samples: []*nbsv1.Sample{{MetricId: "tcp_reset", Value: float64(time), State: nbsv1.State_STATE_OK}}}
	for i := range children {
		id := fmt.Sprintf("tcp_reset/sent/r%d", i)
		r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: id, Value: 1, State: nbsv1.State_STATE_WARN})
		r.Events = append(r.Events, &nbsv1.Event{MetricId: id, TimeUnixNano: time,
			Fields: map[string]string{"pad": strings.Repeat("x", pad)}})
	}
	if children > 0 {
		r.Histograms = append(r.Histograms, &nbsv1.Histogram{MetricId: "latency/rto", BucketIndex: []uint32{3}, BucketCount: []uint64{1}, Count: 1})
	}
	return r
}

func seqs(rs []*nbsv1.Report) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.GetSequence()
	}
	return out
}

func all(s *Spool) []*nbsv1.Report {
	var out []*nbsv1.Report
	var after uint64
	for {
		rs, more := s.After(after, 1<<20)
		out = append(out, rs...)
		if len(rs) == 0 {
			return out
		}
		after = rs[len(rs)-1].GetSequence()
		select {
		case <-more:
		default:
			return out
		}
	}
}

func reportFiles(t *testing.T, dir string) (names []string, bytes int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), reportSuffix) {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, e.Name())
			bytes += info.Size()
		}
	}
	return names, bytes
}

func TestAddAckAndReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, Node: "n1"})
	inst := s.Instance()
	_, changed := s.After(0, 1<<20)
	for i := range 5 {
		s.Add(report(int64(i+1), 1, 0))
	}
	select {
	case <-changed:
	default:
		t.Fatal("Add did not signal a waiting sender")
	}
	if got := seqs(all(s)); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("sequences %v, want 1..5", got)
	}
	s.Ack(2)
	s.Ack(4)
	s.Ack(99) // unknown: ignored
	if got := seqs(all(s)); !slices.Equal(got, []uint64{1, 3, 5}) {
		t.Fatalf("after acking 2 and 4: %v, want [1 3 5]", got)
	}
	if got, _ := s.After(3, 1<<20); !slices.Equal(seqs(got), []uint64{5}) {
		t.Fatalf("After(3) = %v, want [5]", seqs(got))
	}
	if names, _ := reportFiles(t, dir); len(names) != 3 {
		t.Fatalf("report files %v, want 3 (acked ones removed)", names)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The next agent: same instance, the reports in order, with their
	// contents, and new sequences above every earlier one.
	s2 := open(t, Options{Dir: dir, Node: "n1"})
	if s2.Instance() != inst {
		t.Fatalf("instance %x after restart, want %x (the collector dedups on it)", s2.Instance(), inst)
	}
	got := all(s2)
	if !slices.Equal(seqs(got), []uint64{1, 3, 5}) {
		t.Fatalf("replayed %v, want [1 3 5]", seqs(got))
	}
	want := report(3, 1, 0)
	want.Sequence = 3
	if !proto.Equal(got[1], want) {
		t.Fatalf("replayed report 3 = %v, want %v", got[1], want)
	}
	s2.Add(report(6, 0, 0))
	got = all(s2)
	if last := got[len(got)-1].GetSequence(); last <= 5 || len(got) != 4 {
		t.Fatalf("after restart and one more report: %v; want [1 3 5 x] with x > 5", seqs(got))
	}
	if s2.Len() != 4 || s2.Dropped() != 0 {
		t.Fatalf("Len %d Dropped %d, want 4 and 0", s2.Len(), s2.Dropped())
	}
}

// Sequences never repeat under one instance, however often the agent
// restarts and whatever was acked: the collector would take a reused one for
// a report it already has, and lose the new one.
func TestSequencesIncreaseAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	var inst uint64
	for i := range 3 {
		s := open(t, Options{Dir: dir, Node: "n1"})
		if i == 0 {
			inst = s.Instance()
		} else if s.Instance() != inst {
			t.Fatalf("restart %d: instance changed", i)
		}
		for range 3 {
			r := report(1, 0, 0)
			s.Add(r)
			if r.GetSequence() <= last {
				t.Fatalf("restart %d: sequence %d after %d", i, r.GetSequence(), last)
			}
			last = r.GetSequence()
			s.Ack(last) // everything acked: only the state remembers
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// kill -9 or a power loss can leave any file half-written. Each kind of
// damage is detected and skipped; the rest is replayed.
func TestDamagedFilesAreSkipped(t *testing.T) {
	cases := []struct {
		name     string
		damage   func(t *testing.T, dir string)
		want     []uint64
		sameInst bool
	}{
		{"torn report", func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, name(2)), 7) }, []uint64{1, 3}, true},
		{"report cut inside its payload", func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, name(3)), -5) }, []uint64{1, 2}, true},
		{"flipped byte", func(t *testing.T, dir string) { flip(t, filepath.Join(dir, name(1)), frameHeader+2) }, []uint64{2, 3}, true},
		{"empty report", func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, name(1)), 0) }, []uint64{2, 3}, true},
		{"report under another name", func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, name(3)), filepath.Join(dir, name(9))); err != nil {
				t.Fatal(err)
			}
		}, []uint64{1, 2}, true},
		{"write that never reached its rename", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, name(4)+tmpSuffix), []byte("NBSR\x10"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []uint64{1, 2, 3}, true},
		{"torn definitions append", func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, definitionsName), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.Write([]byte("NBSD\xff\x00"))
			_ = f.Close()
		}, []uint64{1, 2, 3}, true},
		{"torn state", func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, stateName), 10) }, []uint64{1, 2, 3}, false},
		{"no state", func(t *testing.T, dir string) { _ = os.Remove(filepath.Join(dir, stateName)) }, []uint64{1, 2, 3}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, Options{Dir: dir, Node: "n1", Describe: func(id string) (*nbsv1.MetricDefinition, bool) {
				return &nbsv1.MetricDefinition{Id: id, Title: id}, true
			}})
			inst := s.Instance()
			for i := range 3 {
				s.Add(report(int64(i+1), 1, 10))
			}
			_ = s.Close()
			c.damage(t, dir)

			s2 := open(t, Options{Dir: dir, Node: "n1"})
			if got := seqs(all(s2)); !slices.Equal(got, c.want) {
				t.Fatalf("replayed %v, want %v", got, c.want)
			}
			if (s2.Instance() == inst) != c.sameInst {
				t.Errorf("instance kept = %v, want %v", s2.Instance() == inst, c.sameInst)
			}
			if _, ok := s2.Definition("tcp_reset/sent/r0"); !ok {
				t.Error("the definition of a spooled metric was lost")
			}
			if r := report(4, 0, 0); true {
				s2.Add(r)
				if r.GetSequence() <= 3 {
					t.Errorf("new report got sequence %d, not above the replayed ones", r.GetSequence())
				}
			}
			names, _ := reportFiles(t, dir)
			for _, n := range names {
				if strings.HasSuffix(n, tmpSuffix) {
					t.Errorf("leftover %s", n)
				}
			}
		})
	}
}

func name(seq uint64) string { return fmt.Sprintf("%020d%s", seq, reportSuffix) }

// truncate cuts a file to n bytes, or by -n bytes when n is negative.
func truncate(t *testing.T, path string, n int64) {
	t.Helper()
	if n < 0 {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

func flip(t *testing.T, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// When full, the oldest reports lose their children first; only when every
// report left is roots-only do whole reports go, oldest first. Every sample
// given up is counted, and the bound holds on disk after every append.
func TestFullDropsChildrenBeforeRoots(t *testing.T) {
	dir := t.TempDir()
	big := proto.Size(report(1, 4, 200)) + frameHeader
	small := proto.Size(report(1, 0, 0)) + frameHeader
	max := int64(3*big + 2*small)
	s := open(t, Options{Dir: dir, Node: "n1", MaxBytes: max})

	var appended []*nbsv1.Report
	check := func(step string) {
		t.Helper()
		if s.Bytes() > max {
			t.Fatalf("%s: holds %d bytes, bound %d", step, s.Bytes(), max)
		}
		if _, onDisk := reportFiles(t, dir); onDisk > max || onDisk != s.Bytes() {
			t.Fatalf("%s: %d bytes of report files, counted %d, bound %d", step, onDisk, s.Bytes(), max)
		}
		// What is held plus what was counted as dropped is what was appended.
		var held, total uint64
		for _, r := range all(s) {
			held += uint64(items(r))
		}
		for _, r := range appended {
			total += uint64(items(r))
		}
		if held+s.Dropped() != total {
			t.Fatalf("%s: %d held + %d dropped != %d appended", step, held, s.Dropped(), total)
		}
	}
	for i := range 3 {
		r := report(int64(i+1), 4, 200)
		appended = append(appended, proto.Clone(r).(*nbsv1.Report))
		s.Add(r)
		check(fmt.Sprintf("report %d", i+1))
	}
	if s.Dropped() != 0 {
		t.Fatalf("dropped %d before the spool was full", s.Dropped())
	}
	// A fourth big report does not fit: the oldest report loses its
	// children (4 samples, 4 events, 1 histogram) and keeps its root.
	r4 := report(4, 4, 200)
	appended = append(appended, proto.Clone(r4).(*nbsv1.Report))
	s.Add(r4)
	check("report 4")
	got := all(s)
	if !slices.Equal(seqs(got), []uint64{1, 2, 3, 4}) {
		t.Fatalf("held %v, want all four reports (trimmed, not dropped)", seqs(got))
	}
	if items(got[0]) != 1 || got[0].Samples[0].GetMetricId() != "tcp_reset" || s.Dropped() != 9 {
		t.Fatalf("oldest report after trimming: %v, dropped %d; want its root sample only, 9 dropped", got[0], s.Dropped())
	}
	if items(got[1]) != 10 {
		t.Fatalf("second report lost children before the first was roots-only: %d entries", items(got[1]))
	}
	// More: children keep going, oldest first, until every report is
	// roots-only; then whole reports, oldest first.
	first, wholeDropped := uint64(1), false
	for i := 5; i <= 120; i++ { // enough for roots alone to fill the spool
		r := report(int64(i), 4, 200)
		appended = append(appended, proto.Clone(r).(*nbsv1.Report))
		s.Add(r)
		check(fmt.Sprintf("report %d", i))
		got := all(s)
		trimmedSeen := false
		for j := len(got) - 1; j >= 0; j-- {
			roots := items(got[j]) == 1
			if roots {
				trimmedSeen = true
			} else if trimmedSeen {
				t.Fatalf("report %d keeps its children while a newer one lost them: %v", got[j].GetSequence(), seqs(got))
			}
		}
		if got[0].GetSequence() != first {
			// A whole report went: only once no held report had a child left.
			for _, r := range got {
				if items(r) != 1 {
					t.Fatalf("report %d was dropped while report %d still had children", first, r.GetSequence())
				}
			}
			first = got[0].GetSequence()
			wholeDropped = true
		}
		if got[len(got)-1].GetSequence() != uint64(i) {
			t.Fatalf("the newest report %d was dropped: %v", i, seqs(got))
		}
	}
	if !wholeDropped {
		t.Fatal("never dropped a whole report although the spool stayed full")
	}
	got = all(s)
	for i := 1; i < len(got); i++ {
		if got[i].GetSequence() != got[i-1].GetSequence()+1 {
			t.Fatalf("held %v: whole reports must go oldest first", seqs(got))
		}
	}

	// The bound survives a restart, and a smaller one is applied at once.
	_ = s.Close()
	s2 := open(t, Options{Dir: dir, Node: "n1", MaxBytes: int64(2 * small)})
	if s2.Bytes() > int64(2*small) {
		t.Fatalf("after reopening with a smaller bound: %d bytes held", s2.Bytes())
	}
	if _, onDisk := reportFiles(t, dir); onDisk != s2.Bytes() {
		t.Fatalf("after reopening: %d bytes on disk, %d counted", onDisk, s2.Bytes())
	}
}

func TestMaxReportsDropsOldest(t *testing.T) {
	for _, dir := range []string{"", "disk"} {
		t.Run("dir="+dir, func(t *testing.T) {
			if dir != "" {
				dir = t.TempDir()
			}
			s := open(t, Options{Dir: dir, Node: "n1", MaxReports: 3})
			for i := range 5 {
				s.Add(report(int64(i+1), 1, 0))
			}
			if got := seqs(all(s)); !slices.Equal(got, []uint64{3, 4, 5}) {
				t.Fatalf("held %v, want [3 4 5]", got)
			}
			// Two reports of a root, a child sample, a histogram and an event.
			if s.Dropped() != 8 || s.Len() != 3 {
				t.Fatalf("dropped %d, len %d; want 8 and 3", s.Dropped(), s.Len())
			}
			s.Discard(4)
			if s.Dropped() != 12 || s.Len() != 2 {
				t.Fatalf("after Discard: dropped %d, len %d; want 12 and 2", s.Dropped(), s.Len())
			}
		})
	}
}

func TestOneAgentPerDirectory(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, Node: "n1"})
	if _, err := Open(Options{Dir: dir, Node: "n1"}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v, want an error saying the spool is in use", err)
	}
	_ = s.Close()
	s2, err := Open(Options{Dir: dir, Node: "n1"})
	if err != nil {
		t.Fatalf("Open after the first agent closed it: %v", err)
	}
	_ = s2.Close()
}

// Reports left by another node name are not replayed as this node's.
func TestAnotherNodesSpoolIsDiscarded(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, Node: "template"})
	inst := s.Instance()
	s.Add(report(1, 1, 0))
	_ = s.Close()
	s2 := open(t, Options{Dir: dir, Node: "n1"})
	if s2.Len() != 0 || s2.Instance() == inst {
		t.Fatalf("held %d reports under instance %x (old %x); want none, under a new instance", s2.Len(), s2.Instance(), inst)
	}
	if names, _ := reportFiles(t, dir); len(names) != 0 {
		t.Fatalf("report files %v left", names)
	}
}

// Definitions are kept for metrics the held reports use, across restarts,
// and pruned when no held report uses them.
func TestDefinitionsFollowTheReports(t *testing.T) {
	dir := t.TempDir()
	lookups := 0
	lookup := func(id string) (*nbsv1.MetricDefinition, bool) {
		lookups++
		return &nbsv1.MetricDefinition{Id: id, Title: "title of " + id}, true
	}
	s := open(t, Options{Dir: dir, Node: "n1", Describe: lookup})
	using := func(ids ...string) *nbsv1.Report {
		r := &nbsv1.Report{TimeUnixNano: 1, IntervalMs: 1000}
		for _, id := range ids {
			r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: id})
		}
		return r
	}
	s.Add(using("ping/gw/rtt"))
	s.Add(using("ping/gw/rtt", "drops/x"))
	if lookups != 5 { // ping, ping/gw, ping/gw/rtt; then only drops/x and drops
		t.Fatalf("%d lookups, want 5: known definitions are not looked up again", lookups)
	}
	s.Add(using("drops/x"))
	s.Ack(1)
	s.Ack(2)
	_ = s.Close()

	s2 := open(t, Options{Dir: dir, Node: "n1"})
	size := func(id string) int {
		s2.mu.Lock()
		defer s2.mu.Unlock()
		return s2.definitionSize(id)
	}
	for _, id := range []string{"drops/x", "drops"} {
		if d, ok := s2.Definition(id); !ok || d.GetTitle() != "title of "+id || size(id) != proto.Size(d) {
			t.Errorf("definition %s after restart: %v %v", id, d, ok)
		}
	}
	for _, id := range []string{"ping/gw/rtt", "ping/gw", "ping"} {
		if _, ok := s2.Definition(id); ok {
			t.Errorf("%s is used only by acked reports but was kept", id)
		}
	}
}

// A disk that stops taking writes costs durability, not reports.
func TestDiskFailureKeepsReportsInMemory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	s := open(t, Options{Dir: dir, Node: "n1"})
	s.Add(report(1, 1, 0))
	// Sent once (from memory) and not acked: a resend reads it back.
	if got := seqs(all(s)); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("held %v, want [1]", got)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.Add(report(2, 1, 0))
	s.Add(report(3, 1, 0))
	if got := seqs(all(s)); !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("held %v, want [2 3] (1 was on the removed disk)", got)
	}
	s.Ack(2)
	if got := seqs(all(s)); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("after ack: %v, want [3]", got)
	}
}

func TestMemorySpool(t *testing.T) {
	s := open(t, Options{MaxBytes: 1 << 20})
	a, b := report(1, 2, 0), report(2, 2, 0)
	s.Add(a)
	s.Add(b)
	if a.GetSequence() != 1 || b.GetSequence() != 2 || s.Instance() == 0 || s.Persistent() {
		t.Fatalf("seqs %d %d instance %x persistent %v", a.GetSequence(), b.GetSequence(), s.Instance(), s.Persistent())
	}
	got, _ := s.After(0, 1) // at least one, however small the budget
	if !slices.Equal(seqs(got), []uint64{1}) {
		t.Fatalf("After with a tiny budget: %v, want [1]", seqs(got))
	}
}

// Metrics that come and go (ping targets, devices) do not grow the
// definitions for ever: those no held report uses are pruned.
func TestUnusedDefinitionsArePruned(t *testing.T) {
	dir := t.TempDir()
	lookup := func(id string) (*nbsv1.MetricDefinition, bool) {
		return &nbsv1.MetricDefinition{Id: id, Title: id}, true
	}
	s := open(t, Options{Dir: dir, Node: "n1", Describe: lookup})
	const held, metrics = 5, 3 * minDefinitions
	id := func(i int) string { return fmt.Sprintf("ping/t%d", i) }
	var sent []uint64
	for i := range metrics {
		r := &nbsv1.Report{TimeUnixNano: 1, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: id(i)}}}
		s.Add(r)
		sent = append(sent, r.GetSequence())
		if i >= held { // the collector acks all but the newest few
			s.Ack(sent[i-held])
		}
	}
	s.mu.Lock()
	n := len(s.defs)
	s.mu.Unlock()
	if n >= 2*minDefinitions {
		t.Fatalf("%d definitions held for %d metrics, %d of them in use", n, metrics, held)
	}
	check := func(s *Spool, when string) {
		for i := metrics - held; i < metrics; i++ {
			for _, id := range []string{id(i), "ping"} {
				if _, ok := s.Definition(id); !ok {
					t.Errorf("%s: definition %s lost although a held report uses it", when, id)
				}
			}
		}
	}
	check(s, "after pruning")
	_ = s.Close()
	s2 := open(t, Options{Dir: dir, Node: "n1"})
	check(s2, "after a restart")
	s2.mu.Lock()
	n = len(s2.defs)
	s2.mu.Unlock()
	if n != held+1 {
		t.Errorf("after a restart: %d definitions, want the %d the held reports use", n, held+1)
	}
}

// A report's first sending is the report Add was given, not its file read
// back and decoded; a resend reads the file, which holds the same report.
// Only about maxFresh bytes of reports wait decoded: past them (a collector
// out of reach) the rest are read back, the same reports in order.
func TestFirstSendingIsFromMemory(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir(), Node: "n1"})
	r := report(1, 3, 10)
	s.Add(r)
	got, _ := s.After(0, 1<<20)
	if len(got) != 1 || got[0] != r {
		t.Fatalf("first sending %v, want the report added (%p)", got, r)
	}
	again, _ := s.After(0, 1<<20)
	if len(again) != 1 || again[0] == r || !proto.Equal(again[0], r) {
		t.Fatalf("resend %v, want report 1 read back from its file, equal to the one added", again)
	}
	s.Ack(1)

	var added []*nbsv1.Report
	for i := range 4 * maxFresh / (100 << 10) {
		r := report(int64(i+2), 10, 10<<10) // about 100 KiB
		added = append(added, r)
		s.Add(r)
		if s.fresh > maxFresh || s.freshN > maxFreshReports {
			t.Fatalf("after %d reports of about 100 KiB, %d bytes in %d reports held decoded, over %d or %d", i+1, s.fresh, s.freshN, maxFresh, maxFreshReports)
		}
	}
	got = all(s)
	if len(got) != len(added) {
		t.Fatalf("%d reports sent, want %d", len(got), len(added))
	}
	var fromMemory int
	for i, r := range got {
		if r == added[i] {
			fromMemory++
		}
		if !proto.Equal(r, added[i]) {
			t.Fatalf("report %d sent differs from the one added", r.GetSequence())
		}
	}
	if fromMemory != maxFreshReports || s.fresh != 0 || s.freshN != 0 {
		t.Fatalf("%d of %d sent from memory, %d bytes in %d reports still held decoded; want %d, and none left", fromMemory, len(added), s.fresh, s.freshN, maxFreshReports)
	}
}

// A report is encoded into a buffer of its size: the encoding reuses the
// sizes split worked out, and a buffer short by the sequence would be
// doubled by its last append.
func TestReportEncodedInItsSize(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir(), Node: "n1"})
	for i := range maxFreshReports {
		s.Add(report(int64(i+1), 50, 100))
	}
	for _, e := range s.entries {
		if e.enc == nil {
			t.Fatalf("report %d not held encoded", e.seq)
		}
		if len(e.enc) < 5000 || cap(e.enc)-len(e.enc) > 1+binary.MaxVarintLen64 {
			t.Errorf("report %d: %d bytes in a buffer of %d", e.seq, len(e.enc), cap(e.enc))
		}
	}
}
