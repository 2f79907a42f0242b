// Package spool keeps an agent's un-acknowledged reports on disk, so neither
// an agent restart nor a reboot loses what was measured while the collector
// could not be reached. It is bounded in bytes and in reports; when full it
// gives up the oldest children (per-reason, per-target detail) before any
// root, and only then whole reports, counting every sample it drops.
//
// The directory holds:
//
//	lock                          flock'd while an agent uses the spool
//	state                         instance id, sequences reserved, node name
//	definitions                   definitions of the metrics the reports use
//	00000000000000000042.report   one report, named by its sequence
//
// Each file is made of CRC-checked frames (frame.go). A report or the state
// is written to a temporary file, fsync'd and renamed into place, so a crash
// leaves the old file or the new one; definitions are appended and fsync'd,
// and a torn last frame is cut off at the next start. Anything damaged is
// logged and skipped, never fatal.
//
// Why the instance and the sequence persist: the collector stores a report
// once per (node, instance, sequence) and acks one it already has without
// storing it again. A restarted agent that continues its predecessor's
// instance and numbering replays each spooled report under the key it may
// already be stored under, so the collector drops exactly the duplicates
// (reports it stored before the ack reached the old agent). A fresh instance
// would store those a second time; the old instance with a fresh numbering
// would make the collector take new reports for old ones and lose them.
// Sequences are reserved in blocks (seqReserve), so the state is rewritten
// once per block rather than per report; a restart skips the rest of the
// block, which the collector accepts: it needs sequences to increase on a
// stream, not to be dense.
package spool

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const (
	// DefaultMaxBytes bounds the spool when Options.MaxBytes is 0.
	DefaultMaxBytes = 256 << 20
	// seqReserve sequences are recorded in the state file at a time.
	seqReserve = 1024
	// maxDefinitionsBytes bounds what is read of the definitions file: far
	// more than the collector's 20,000 metrics per node take.
	maxDefinitionsBytes = 256 << 20
	// minDefinitions is how many definitions are kept before unused ones
	// are pruned (they are pruned again each time their number doubles).
	minDefinitions = 1024

	lockName        = "lock"
	stateName       = "state"
	definitionsName = "definitions"
	reportSuffix    = ".report"
)

type Options struct {
	// Dir holds the spool; "" keeps reports in memory only, lost on restart.
	Dir string
	// Node is the node the reports belong to. A spool left by another node
	// name (a cloned disk image, a renamed host) is discarded rather than
	// replayed under this one.
	Node string
	// MaxBytes bounds the reports held (0: DefaultMaxBytes).
	MaxBytes int64
	// MaxReports bounds how many are held (0: only MaxBytes applies).
	MaxReports int
	Logger     *slog.Logger
}

type entry struct {
	seq       uint64
	size      int64  // bytes counted against MaxBytes
	items     int    // samples, histograms and events
	rootsOnly bool   // no child left to trim
	gone      bool   // acked or dropped: skipped, and removed at the front
	mem       []byte // the encoded report when it is not on disk
}

// Spool holds un-acked reports in sequence order. It is safe for concurrent
// use; disk writes happen under its lock, which is fine at one report per
// interval.
type Spool struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	dir      *os.File // fsync'd after renames; nil when in memory
	lock     *os.File
	defsFile *os.File // definitions, opened for appending
	instance uint64
	next     uint64 // sequence of the next report
	reserved uint64 // sequences up to here are recorded in the state file
	entries  []entry
	live     int
	bytes    int64
	dropped  uint64
	defs     map[string]*definition
	defsBase int // definitions kept at the last pruning
	changed  chan struct{}
	diskErr  error // logged once until a write succeeds again
	full     fullness
}

type definition struct {
	def      *nbsv1.MetricDefinition
	size     int
	lastUsed uint64 // the first sequence of the last report using it
}

// fullness collects what the bounds cost, logged at most once a minute.
type fullness struct {
	trimmed, reports int
	samples          uint64
	logged           time.Time
}

// Open opens (creating it if needed) and locks the spool in opts.Dir, and
// loads what an earlier agent left there. With an empty Dir it returns a
// spool in memory. An error means the directory cannot be used at all (not
// writable, or locked by another agent); damaged files are skipped.
func Open(opts Options) (*Spool, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxReports <= 0 {
		opts.MaxReports = math.MaxInt
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Spool{opts: opts, log: opts.Logger, defs: map[string]*definition{}, defsBase: minDefinitions,
		changed: make(chan struct{})}
	if opts.Dir == "" {
		s.instance, s.next, s.reserved = newInstance(), 1, math.MaxUint64
		return s, nil
	}
	if err := s.load(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("spool %s: %w", opts.Dir, err)
	}
	return s, nil
}

func newInstance() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1 // never zero: the collector requires one
}

func (s *Spool) load() error {
	dir := s.opts.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	s.lock = lock
	// The kernel releases a flock when its holder dies, however it dies.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return errors.New("in use by another agent (two agents must not share a spool directory)")
		}
		return fmt.Errorf("lock: %w", err)
	}
	if s.dir, err = os.Open(dir); err != nil {
		return err
	}
	names, err := s.dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	var seqs []uint64
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			// A write that never reached its rename: it did not happen.
			_ = os.Remove(filepath.Join(dir, name))
		case strings.HasSuffix(name, reportSuffix):
			seq, err := strconv.ParseUint(strings.TrimSuffix(name, reportSuffix), 10, 64)
			if err != nil || seq == 0 {
				s.log.Warn("spool: ignoring a file that is not a report", "file", name)
				continue
			}
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)

	st, stErr := readState(dir)
	fresh := true
	switch {
	case stErr == nil && st.node == s.opts.Node:
		s.instance, s.next, fresh = st.instance, st.reserved+1, false
	case stErr == nil:
		s.log.Warn("spool: left by another node; discarding its reports rather than sending them as this node's",
			"dir", dir, "spool_node", st.node, "node", s.opts.Node, "reports", len(seqs))
		for _, seq := range seqs {
			_ = os.Remove(s.reportPath(seq))
		}
		_ = os.Remove(filepath.Join(dir, definitionsName))
		seqs = nil
	case errors.Is(stErr, fs.ErrNotExist):
		if len(seqs) > 0 {
			s.log.Warn("spool: reports without a state file; replaying them under a new instance, so any the collector "+
				"already stored is counted twice", "dir", dir, "reports", len(seqs))
		}
	default:
		s.log.Error("spool: state unreadable; replaying its reports under a new instance, so any the collector "+
			"already stored is counted twice", "dir", dir, "err", stErr, "reports", len(seqs))
	}
	if fresh {
		s.instance, s.next = newInstance(), 1
	}

	used := map[string]uint64{}
	for _, seq := range seqs {
		r, b, err := s.readReport(seq)
		if err != nil {
			s.log.Warn("spool: skipping a damaged report", "seq", seq, "err", err)
			_ = os.Remove(s.reportPath(seq))
			s.dropped++ // its samples cannot be counted; it held at least one
			continue
		}
		s.push(entry{seq: seq, size: int64(len(b)) + frameHeader, items: items(r), rootsOnly: !hasChildren(r)})
		for _, id := range ids(r) {
			for p := id; p != ""; p = schema.Parent(p) {
				used[p] = seq
			}
		}
		s.next = max(s.next, seq+1)
	}
	if err := s.loadDefinitions(used); err != nil {
		return err
	}
	s.reserved = s.next - 1
	if err := s.reserve(1); err != nil {
		return err
	}
	if err := s.dir.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if s.live > 0 {
		s.log.Info("spool: replaying reports left by the previous agent", "dir", dir, "reports", s.live,
			"bytes", s.bytes, "first_seq", s.entries[0].seq, "instance", fmt.Sprintf("%016x", s.instance))
	}
	s.enforce() // the bounds may have shrunk since
	return nil
}

// loadDefinitions reads the definitions file up to its first damaged frame
// and rewrites it with only the definitions the spooled reports use.
func (s *Spool) loadDefinitions(used map[string]uint64) error {
	b, err := readUpTo(filepath.Join(s.opts.Dir, definitionsName), maxDefinitionsBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("spool: definitions unreadable; replayed reports carry only what this agent still defines", "err", err)
	}
	for off := 0; off < len(b); {
		payload, n, err := readFrame(b[off:], magicDefinition)
		if err != nil {
			s.log.Warn("spool: definitions end in a torn write; cut there", "offset", off, "bytes", len(b)-off)
			break
		}
		off += n
		d := &nbsv1.MetricDefinition{}
		if err := proto.Unmarshal(payload, d); err != nil {
			s.log.Warn("spool: skipping a damaged definition", "err", err)
			continue
		}
		if seq, ok := used[d.GetId()]; ok {
			s.defs[d.GetId()] = &definition{def: d, size: proto.Size(d), lastUsed: seq}
		}
	}
	return s.rewriteDefinitions()
}

// rewriteDefinitions replaces the definitions file with the ones held, and
// reopens it for appending.
func (s *Spool) rewriteDefinitions() error {
	var buf []byte
	for _, id := range slices.Sorted(maps.Keys(s.defs)) {
		b, err := proto.Marshal(s.defs[id].def)
		if err != nil {
			continue
		}
		buf = appendFrame(buf, magicDefinition, b)
	}
	if s.defsFile != nil {
		_ = s.defsFile.Close()
		s.defsFile = nil
	}
	if err := writeAtomic(s.opts.Dir, definitionsName, buf); err != nil {
		return err
	}
	// Before appending to the new file: a rename undone by a power loss
	// would take the appended definitions with it.
	if err := s.dir.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(s.opts.Dir, definitionsName), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open definitions: %w", err)
	}
	s.defsFile = f
	return nil
}

type state struct {
	instance, reserved uint64
	node               string
}

func readState(dir string) (state, error) {
	payload, err := readWhole(filepath.Join(dir, stateName), magicState)
	if err != nil {
		return state{}, err
	}
	if len(payload) < 16 {
		return state{}, fmt.Errorf("state: %d bytes: %w", len(payload), errTorn)
	}
	st := state{instance: binary.LittleEndian.Uint64(payload), reserved: binary.LittleEndian.Uint64(payload[8:]),
		node: string(payload[16:])}
	if st.instance == 0 {
		return state{}, fmt.Errorf("state: no instance: %w", errTorn)
	}
	return st, nil
}

// reserve makes sure the next n sequences are recorded in the state file
// before they are handed out, so a restarted agent never reuses one.
func (s *Spool) reserve(n int) error {
	if s.next+uint64(n)-1 <= s.reserved {
		return nil
	}
	upTo := s.next + uint64(n) - 1 + seqReserve
	payload := binary.LittleEndian.AppendUint64(nil, s.instance)
	payload = binary.LittleEndian.AppendUint64(payload, upTo)
	payload = append(payload, s.opts.Node...)
	if err := writeAtomic(s.opts.Dir, stateName, appendFrame(nil, magicState, payload)); err != nil {
		return err
	}
	if err := s.dir.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	s.reserved = upTo
	return nil
}

func (s *Spool) reportPath(seq uint64) string {
	return filepath.Join(s.opts.Dir, fmt.Sprintf("%020d%s", seq, reportSuffix))
}

func (s *Spool) reportName(seq uint64) string { return filepath.Base(s.reportPath(seq)) }

func (s *Spool) readReport(seq uint64) (*nbsv1.Report, []byte, error) {
	b, err := readWhole(s.reportPath(seq), magicReport)
	if err != nil {
		return nil, nil, err
	}
	r := &nbsv1.Report{}
	if err := proto.Unmarshal(b, r); err != nil {
		return nil, nil, fmt.Errorf("decode: %w", err)
	}
	if r.GetSequence() != seq {
		return nil, nil, fmt.Errorf("holds sequence %d: %w", r.GetSequence(), errTorn)
	}
	return r, b, nil
}

// Instance is the instance id reports are stored under: the previous
// agent's when its spool was reused.
func (s *Spool) Instance() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.instance
}

// Persistent reports whether the reports are on disk.
func (s *Spool) Persistent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir != nil
}

// Append gives the reports consecutive sequences (setting their Sequence)
// and stores them, durably before it returns when the spool is on disk.
// When a disk write fails the report is kept in memory instead: it is lost
// only if the agent stops before it is delivered.
func (s *Spool) Append(reports ...*nbsv1.Report) {
	if len(reports) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != nil {
		if err := s.reserve(len(reports)); err != nil {
			s.loseState(err)
		}
	}
	wrote := false
	for _, r := range reports {
		r.Sequence = s.next
		s.next++
		b, err := proto.Marshal(r)
		if err != nil {
			// Unencodable (invalid UTF-8 in a string): it could never be
			// sent, and keeping it would stop every report behind it.
			s.log.Error("spool: dropping a report that cannot be encoded", "seq", r.Sequence, "err", err)
			s.dropped += uint64(items(r))
			continue
		}
		e := entry{seq: r.Sequence, size: int64(len(b)) + frameHeader, items: items(r), rootsOnly: !hasChildren(r)}
		if s.dir != nil && s.writeReport(e.seq, b) {
			wrote = true
		} else {
			e.mem = b
		}
		s.push(e)
	}
	s.enforce()
	if wrote {
		if err := s.dir.Sync(); err != nil {
			s.diskFailed(fmt.Errorf("sync: %w", err))
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// loseState handles a state file that cannot be updated: reports keep
// their sequences in this run, and the state is removed so that a restarted
// agent starts a new instance instead of reusing sequences the collector
// may already hold (which would lose the new reports as duplicates).
func (s *Spool) loseState(err error) {
	s.log.Error("spool: cannot record sequences; a restart will replay the spool under a new instance, "+
		"so reports the collector already stored may be counted twice", "err", err)
	_ = os.Remove(filepath.Join(s.opts.Dir, stateName))
	s.reserved = math.MaxUint64
}

func (s *Spool) writeReport(seq uint64, b []byte) bool {
	if err := writeAtomic(s.opts.Dir, s.reportName(seq), appendFrame(nil, magicReport, b)); err != nil {
		s.diskFailed(err)
		return false
	}
	if s.diskErr != nil {
		s.log.Info("spool: writing to disk again", "dir", s.opts.Dir)
		s.diskErr = nil
	}
	return true
}

func (s *Spool) diskFailed(err error) {
	if s.diskErr == nil {
		s.log.Error("spool: disk write failed; keeping reports in memory until it works again", "dir", s.opts.Dir, "err", err)
	}
	s.diskErr = err
}

func (s *Spool) push(e entry) {
	s.entries = append(s.entries, e)
	s.live++
	s.bytes += e.size
}

// Ack forgets a report the collector has stored.
func (s *Spool) Ack(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.find(seq); ok {
		s.remove(i, false)
	}
}

// Discard forgets a report that can never be delivered, counting its
// samples as dropped.
func (s *Spool) Discard(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.find(seq); ok {
		s.remove(i, true)
	}
}

func (s *Spool) find(seq uint64) (int, bool) {
	i, ok := slices.BinarySearchFunc(s.entries, seq, func(e entry, seq uint64) int { return cmp.Compare(e.seq, seq) })
	return i, ok && !s.entries[i].gone
}

func (s *Spool) remove(i int, count bool) {
	e := &s.entries[i]
	e.gone = true
	s.live--
	s.bytes -= e.size
	if count {
		s.dropped += uint64(e.items)
	}
	if e.mem == nil && s.dir != nil {
		// Not fsync'd: a removal undone by a power loss only resends a
		// report, which the collector recognises.
		if err := os.Remove(s.reportPath(e.seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("spool: remove report", "seq", e.seq, "err", err)
		}
	}
	e.mem = nil
	// Acks come mostly in order: dropping gone entries at the front keeps
	// every operation cheap without moving the slice on each ack.
	for len(s.entries) > 0 && s.entries[0].gone {
		s.entries = s.entries[1:]
	}
	if len(s.entries) == 0 {
		s.entries = nil
	}
}

// After returns the reports with a sequence above seq, in order, at most
// about maxBytes of them (at least one), and a channel that is closed when
// there is more to read: at once when the batch was cut short, otherwise
// when a report is appended.
func (s *Spool) After(seq uint64, maxBytes int64) ([]*nbsv1.Report, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*nbsv1.Report
	var total int64
	var unreadable []uint64
	// Removing reorganises the slice: only once the walk is over.
	defer func() {
		for _, seq := range unreadable {
			if i, ok := s.find(seq); ok {
				s.remove(i, true)
			}
		}
	}()
	i, _ := slices.BinarySearchFunc(s.entries, seq+1, func(e entry, seq uint64) int { return cmp.Compare(e.seq, seq) })
	for ; i < len(s.entries); i++ {
		e := &s.entries[i]
		if e.gone {
			continue
		}
		if len(out) > 0 && total+e.size > maxBytes {
			more := make(chan struct{})
			close(more)
			return out, more
		}
		r, err := s.report(e)
		if err != nil {
			s.log.Error("spool: dropping a report that cannot be read back", "seq", e.seq, "err", err)
			unreadable = append(unreadable, e.seq)
			continue
		}
		out = append(out, r)
		total += e.size
	}
	return out, s.changed
}

func (s *Spool) report(e *entry) (*nbsv1.Report, error) {
	if e.mem != nil {
		r := &nbsv1.Report{}
		if err := proto.Unmarshal(e.mem, r); err != nil {
			return nil, err
		}
		return r, nil
	}
	r, _, err := s.readReport(e.seq)
	return r, err
}

// Define records the definitions of the metrics a report about to be
// appended uses (and of their ancestors), so a replay after a restart can
// announce metrics the new agent does not know (anymore). lookup gives a
// definition by id; only ids not yet recorded are looked up.
func (s *Spool) Define(ids []string, lookup func(id string) (*nbsv1.MetricDefinition, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf []byte
	for _, id := range ids {
		for p := id; p != ""; p = schema.Parent(p) {
			if d := s.defs[p]; d != nil {
				d.lastUsed = s.next
				continue
			}
			def, ok := lookup(p)
			if !ok {
				continue
			}
			s.defs[p] = &definition{def: def, size: proto.Size(def), lastUsed: s.next}
			if s.defsFile != nil {
				if b, err := proto.Marshal(def); err == nil {
					buf = appendFrame(buf, magicDefinition, b)
				}
			}
		}
	}
	if len(s.defs) >= 2*s.defsBase {
		s.pruneDefinitions()
		return // rewritten whole, with the new ones
	}
	if len(buf) > 0 && s.defsFile != nil {
		_, err := s.defsFile.Write(buf)
		if err == nil {
			err = s.defsFile.Sync()
		}
		if err != nil {
			s.diskFailed(fmt.Errorf("append definitions: %w", err))
		}
	}
}

// pruneDefinitions forgets definitions no held report uses, so metrics that
// come and go (ping targets, devices) do not grow the spool for ever. A
// definition goes when the last report using it is older than every held
// report: never one still in use, and since acks come in order, all unused
// ones in practice (a restart compacts exactly, from the reports' contents).
func (s *Spool) pruneDefinitions() {
	oldest := s.next
	for _, e := range s.entries {
		if !e.gone {
			oldest = e.seq
			break
		}
	}
	for id, d := range s.defs {
		if d.lastUsed < oldest {
			delete(s.defs, id)
		}
	}
	s.defsBase = max(len(s.defs), minDefinitions)
	if s.dir != nil {
		if err := s.rewriteDefinitions(); err != nil {
			s.diskFailed(err)
		}
	}
}

// Definition returns a recorded definition.
func (s *Spool) Definition(id string) (*nbsv1.MetricDefinition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.defs[id]; d != nil {
		return d.def, true
	}
	return nil, false
}

// DefinitionSize is the encoded size of a recorded definition (0 if none).
func (s *Spool) DefinitionSize(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.defs[id]; d != nil {
		return d.size
	}
	return 0
}

// enforce applies the bounds: beyond MaxReports the oldest reports go; beyond
// MaxBytes the children of the oldest reports go first, then the oldest
// (by then roots-only) reports.
func (s *Spool) enforce() {
	before := s.full
	for s.live > s.opts.MaxReports {
		s.dropOldest()
	}
	for s.bytes > s.opts.MaxBytes && s.live > 0 {
		if i := s.oldestWithChildren(); i >= 0 {
			s.trim(i)
			continue
		}
		s.dropOldest()
	}
	if s.full == before {
		return
	}
	if now := time.Now(); now.Sub(s.full.logged) >= time.Minute {
		s.log.Warn("spool full: dropping the oldest measurements (children first, then whole reports)",
			"reports_trimmed", s.full.trimmed, "reports_dropped", s.full.reports, "samples_dropped", s.full.samples,
			"held_reports", s.live, "held_bytes", s.bytes, "max_bytes", s.opts.MaxBytes, "max_reports", s.opts.MaxReports)
		s.full = fullness{logged: now}
	}
}

func (s *Spool) dropOldest() {
	for i := range s.entries {
		if !s.entries[i].gone {
			s.full.reports++
			s.full.samples += uint64(s.entries[i].items)
			s.remove(i, true)
			return
		}
	}
}

func (s *Spool) oldestWithChildren() int {
	for i, e := range s.entries {
		if !e.gone && !e.rootsOnly {
			return i
		}
	}
	return -1
}

// trim removes every child sample, histogram and event from a report,
// keeping its roots.
func (s *Spool) trim(i int) {
	e := &s.entries[i]
	r, err := s.report(e)
	if err != nil {
		s.log.Error("spool: dropping a report that cannot be read back", "seq", e.seq, "err", err)
		s.full.reports++
		s.full.samples += uint64(e.items)
		s.remove(i, true)
		return
	}
	r.Samples = slices.DeleteFunc(r.Samples, func(x *nbsv1.Sample) bool { return isChild(x.GetMetricId()) })
	r.Histograms = slices.DeleteFunc(r.Histograms, func(x *nbsv1.Histogram) bool { return isChild(x.GetMetricId()) })
	r.Events = slices.DeleteFunc(r.Events, func(x *nbsv1.Event) bool { return isChild(x.GetMetricId()) })
	b, err := proto.Marshal(r)
	if err != nil { // it was encoded once; cannot happen, but must not loop
		s.full.reports++
		s.full.samples += uint64(e.items)
		s.remove(i, true)
		return
	}
	n := items(r)
	s.dropped += uint64(e.items - n)
	s.full.trimmed++
	s.full.samples += uint64(e.items - n)
	s.bytes -= e.size
	e.size, e.items, e.rootsOnly = int64(len(b))+frameHeader, n, true
	s.bytes += e.size
	if e.mem != nil || s.dir == nil {
		e.mem = b
		return
	}
	if !s.writeReport(e.seq, b) {
		// The untrimmed file stays on disk for a restart; this run holds
		// the trimmed one in memory.
		e.mem = b
	}
}

func isChild(id string) bool { return schema.Parent(id) != "" }

func items(r *nbsv1.Report) int {
	return len(r.GetSamples()) + len(r.GetHistograms()) + len(r.GetEvents())
}

func hasChildren(r *nbsv1.Report) bool {
	for _, id := range ids(r) {
		if isChild(id) {
			return true
		}
	}
	return false
}

// ids lists the metric ids a report refers to (with repeats).
func ids(r *nbsv1.Report) []string {
	out := make([]string, 0, items(r))
	for _, x := range r.GetSamples() {
		out = append(out, x.GetMetricId())
	}
	for _, x := range r.GetHistograms() {
		out = append(out, x.GetMetricId())
	}
	for _, x := range r.GetEvents() {
		out = append(out, x.GetMetricId())
	}
	return out
}

// Len is the number of reports held.
func (s *Spool) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

// Bytes is their size, as counted against MaxBytes.
func (s *Spool) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Dropped counts the samples, histograms and events given up since Open:
// trimmed or dropped by the bounds, or discarded as undeliverable.
func (s *Spool) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close releases the directory (and its lock). Reports still held stay on
// disk for the next agent; the spool keeps working in memory.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, f := range []*os.File{s.defsFile, s.dir, s.lock} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	s.defsFile, s.dir, s.lock = nil, nil, nil
	return errors.Join(errs...)
}
