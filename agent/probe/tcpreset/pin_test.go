package tcpreset

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// pinDir is a directory in a bpffs of the test's own, unpinned when the
// test ends.
func pinDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(netlab.BPFFS(t), "nbs", "tcp_reset")
	t.Cleanup(func() {
		if err := bpfload.Unpin(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// A probe with a PinDir leaves its programs counting when it is closed
// (as a killed agent's are), and the next probe adopts its maps and links:
// its counts are the first's plus what happened while none ran. One with
// another configuration adopts the maps but replaces the programs; one
// finding a map of another layout (an upgrade) replaces it and says it
// does not continue.
func TestPinnedCountsSurviveTheProbe(t *testing.T) {
	const n = 5
	l := netlab.New(t)
	dir := pinDir(t)
	ino := l.Inode(t, l.B)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	sentNoSocket := func(p *Probe) uint64 { return named(t, p)["sent/no_socket"] }

	first, err := Load(Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir, Logger: log})
	if err != nil {
		netlab.SkipOrFail(t, "tcpreset: %v", err)
	}
	if first.Continued() {
		t.Error("a probe on an empty pin directory says it continues")
	}
	l.ResetNoSocket(t, n)
	if got := sentNoSocket(first); got != n {
		t.Fatalf("first probe counted %d, want %d", got, n)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	l.ResetNoSocket(t, n) // no probe open: the pinned program counts

	second := load(t, Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir, Logger: log})
	if !second.Continued() {
		t.Error("the second probe does not continue the first's counts")
	}
	if !strings.Contains(logs.String(), "adopted the pinned program") {
		t.Errorf("the same program was not adopted; log:\n%s", logs.String())
	}
	if got := sentNoSocket(second); got != 2*n {
		t.Errorf("second probe reads %d, want %d (the first's and those made while none ran)", got, 2*n)
	}
	l.ResetNoSocket(t, n)
	if got := sentNoSocket(second); got != 3*n {
		t.Errorf("after more resets %d, want %d (an adopted program counts once)", got, 3*n)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}

	// Another configuration: the maps continue, the programs are replaced
	// (not attached twice: each reset counts once).
	logs.Reset()
	third := load(t, Options{NetnsInode: ino, EvidencePerSecond: 999, PinDir: dir, Logger: log})
	if !third.Continued() || !strings.Contains(logs.String(), "replacing the pinned program") {
		t.Errorf("continued %v; want the maps adopted and the program replaced; log:\n%s", third.Continued(), logs.String())
	}
	l.ResetNoSocket(t, n)
	if got := sentNoSocket(third); got != 4*n {
		t.Errorf("third probe reads %d, want %d", got, 4*n)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) == 0 {
		t.Fatal("nothing pinned")
	}

	// An upgrade that changed only a map's size: replaced, its counts
	// carried over.
	resize(t, filepath.Join(dir, "rst_counts"), 1)
	logs.Reset()
	fourth := load(t, Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir, Logger: log})
	if !fourth.Continued() || !strings.Contains(logs.String(), "carried the counts of the replaced map over") {
		t.Errorf("continued %v after a size change; log:\n%s", fourth.Continued(), logs.String())
	}
	if got := sentNoSocket(fourth); got != 4*n {
		t.Errorf("after a size change the probe reads %d, want the %d carried over", got, 4*n)
	}
	l.ResetNoSocket(t, n)
	if got := sentNoSocket(fourth); got != 5*n {
		t.Errorf("after more resets %d, want %d", got, 5*n)
	}
	if err := fourth.Close(); err != nil {
		t.Fatal(err)
	}

	// What agents before the per-CPU array slots counted in rst_percpu
	// (pinned, its programs gone) is read with the slots' counts.
	legacy, err := ebpf.LoadPinnedMap(filepath.Join(dir, "rst_percpu"), nil)
	if err != nil {
		t.Fatal(err)
	}
	code := uint32(0)
	for c := range uint32(64) {
		if fourth.Names().Reason(c) == "no_socket" {
			code = c
		}
	}
	per := make([]tcpresetNbsRstPercpu, mustCPUs(t))
	per[0].Count[0][code] = 7
	if err := legacy.Put(uint32(0), per); err != nil {
		t.Fatal(err)
	}
	legacy.Close()
	sixth := load(t, Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir, Logger: log})
	if got := sentNoSocket(sixth); got != 5*n+7 {
		t.Errorf("with 7 in the legacy per-CPU map the probe reads %d, want %d", got, 5*n+7)
	}
	if err := sixth.Close(); err != nil {
		t.Fatal(err)
	}

	// An upgrade that changed a map's layout: replaced, not continued.
	counts := filepath.Join(dir, "rst_cpus") // where one namespace's resets are counted
	if err := os.Remove(counts); err != nil {
		t.Fatal(err)
	}
	odd, err := ebpf.NewMap(&ebpf.MapSpec{Name: "rst_cpus", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := odd.Pin(counts); err != nil {
		t.Fatal(err)
	}
	odd.Close()
	logs.Reset()
	fifth := load(t, Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir, Logger: log})
	if fifth.Continued() || !strings.Contains(logs.String(), "pinned map cannot be adopted") {
		t.Errorf("continued %v after a layout change; log:\n%s", fifth.Continued(), logs.String())
	}
	l.ResetNoSocket(t, n)
	if got := sentNoSocket(fifth); got != n+7 {
		t.Errorf("fifth probe reads %d, want %d (a fresh map, its program attached once, and the legacy map's 7)", got, n+7)
	}
}

func mustCPUs(t *testing.T) int {
	t.Helper()
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// resize replaces the pinned map at path by one of the same layout with
// more entries, holding the same counts, as an upgrade that grew it
// would leave it for the next agent.
func resize(t *testing.T, path string, more uint32) {
	t.Helper()
	old, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	info, err := old.Info()
	if err != nil {
		t.Fatal(err)
	}
	bigger, err := ebpf.NewMap(&ebpf.MapSpec{Name: info.Name, Type: old.Type(), KeySize: old.KeySize(), ValueSize: old.ValueSize(),
		MaxEntries: old.MaxEntries() + more, Flags: old.Flags()})
	if err != nil {
		t.Fatal(err)
	}
	defer bigger.Close()
	var (
		key []byte
		val [][]byte // per CPU
	)
	it := old.Iterate()
	for it.Next(&key, &val) {
		if err := bigger.Put(key, val); err != nil {
			t.Fatal(err)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := bigger.Pin(path); err != nil {
		t.Fatal(err)
	}
}

// Where pinning fails (a directory outside bpffs), the probe runs as
// without it and says so.
func TestPinFailureRunsUnpinned(t *testing.T) {
	l := netlab.New(t)
	var logs bytes.Buffer
	p := load(t, Options{NetnsInode: l.Inode(t, l.B), EvidencePerSecond: 1000, PinDir: filepath.Join(t.TempDir(), "pins"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if p.Continued() || !strings.Contains(logs.String(), "cannot pin") {
		t.Errorf("continued %v; log:\n%s", p.Continued(), logs.String())
	}
	l.ResetNoSocket(t, 3)
	if got := named(t, p)["sent/no_socket"]; got != 3 {
		t.Errorf("counted %d, want 3", got)
	}
}

// The ring's consumer position counts the records read from it across
// probes: the next probe, adopting the pinned ring, starts from the
// records the first read, and reads on from the ones made while none ran.
func TestConsumedCountsAcrossProbes(t *testing.T) {
	const n = 4
	l := netlab.New(t)
	dir := pinDir(t)
	ino := l.Inode(t, l.B)
	consumed := func(p *Probe) uint64 {
		t.Helper()
		c, err := p.Consumed()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := load(t, Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir})
	if got := consumed(first); got != 0 {
		t.Fatalf("a new ring says %d records were read", got)
	}
	c := collect(first)
	l.ResetNoSocket(t, n)
	if got := len(c.stop(t, n)); got != n {
		t.Fatalf("read %d events, want %d", got, n)
	}
	if got := consumed(first); got != n {
		t.Errorf("after reading %d events Consumed is %d", n, got)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	l.ResetNoSocket(t, n) // no probe open: the pinned program writes the ring
	second := load(t, Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir})
	if got := consumed(second); got != n {
		t.Errorf("the next probe starts at %d records read, want %d", got, n)
	}
	c = collect(second)
	if got := len(c.stop(t, n)); got != n {
		t.Fatalf("the next probe read %d events, want the %d made while none ran", got, n)
	}
	if got := consumed(second); got != 2*n {
		t.Errorf("Consumed %d, want %d", got, 2*n)
	}
}

// An upgrade from an agent that counted in the hash and the stats map
// (before the per-CPU slots): the new probe adopts both and adds what
// they hold to its own counts, so the counts go on exactly.
func TestUpgradeFromTheHashKeepsCounts(t *testing.T) {
	const before, suppressed, n = 3, 7, 4
	l := netlab.New(t)
	dir := pinDir(t)
	ino := l.Inode(t, l.B)
	names, err := LoadNames(nil)
	if err != nil {
		netlab.SkipOrFail(t, "tcpreset names: %v", err)
	}
	noSocket, ok := names.ReasonCode("no_socket")
	if !ok {
		t.Fatal("no no_socket reason in this kernel's BTF")
	}
	spec, err := loadTcpreset()
	if err != nil {
		t.Fatal(err)
	}
	// The older agent's maps, as it left them pinned.
	pin := func(name string, key any, perCPU any) {
		t.Helper()
		ms := spec.Maps[name].Copy()
		ms.Pinning = ebpf.PinNone
		m, err := ebpf.NewMap(ms)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := m.Put(key, perCPU); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]uint64, cpus)
	counts[0] = before
	pin("rst_counts", tcpresetNbsRstKey{Netns: ino, Direction: uint32(DirectionSent), Code: noSocket}, counts)
	stats := make([]tcpresetNbsRstStats, cpus)
	stats[cpus-1].Suppressed = suppressed
	pin("rst_stats", uint32(0), stats)

	p := load(t, Options{NetnsInode: ino, EvidencePerSecond: 1000, PinDir: dir})
	if !p.Continued() {
		t.Error("the probe does not continue the older agent's counts")
	}
	if got := named(t, p)["sent/no_socket"]; got != before {
		t.Errorf("the adopted hash reads %d, want %d", got, before)
	}
	l.ResetNoSocket(t, n)
	if got := named(t, p)["sent/no_socket"]; got != before+n {
		t.Errorf("after %d resets %d, want %d", n, got, before+n)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Suppressed != suppressed {
		t.Errorf("suppressed %d, want the %d the adopted stats map holds", st.Suppressed, suppressed)
	}
}
