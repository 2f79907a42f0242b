// Package spool is the agent's outbox: it holds every report until the
// collector acks it, with the definitions of the metrics it uses, and keeps
// both on disk, so neither an agent restart nor a reboot loses what was
// measured while the collector could not be reached. It gives each report
// its sequence, cutting one the collector would refuse into parts it takes
// (split.go). It is bounded in bytes and in reports; when full it gives up
// the oldest children (per-reason, per-target detail) before any root, and
// only then whole reports, counting every sample it drops (evict.go).
//
// A report's way in is Add, under one lock: its definitions are recorded
// (registry.go), it is split to the collector's limits (split.go), its
// parts are numbered and written (store; the files in disk.go, their format
// in format.go), and the bounds are applied (evict.go). The uplink takes
// them with After (a report's first sending is the one Add was given, a
// resend is read back) and forgets them with Ack or Discard.
//
// The directory holds:
//
//	lock                          flock'd while an agent uses the spool
//	state                         instance id, sequences reserved, node name
//	definitions                   definitions of the metrics the reports use
//	00000000000000000042.report   one report, named by its sequence
//
// Each file is made of CRC-checked frames (format.go). A report or the state
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
	"math"
	"os"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// DefaultMaxBytes bounds the spool when Options.MaxBytes is 0.
const DefaultMaxBytes = 256 << 20

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
	// Describe gives the definition of a metric the agent knows, recorded
	// with the reports that use it (nil: none is recorded).
	Describe func(id string) (*nbsv1.MetricDefinition, bool)
	Logger   *slog.Logger
}

type entry struct {
	seq       uint64
	size      int64  // bytes counted against MaxBytes
	items     int    // samples, histograms and events
	rootsOnly bool   // no child left to trim
	gone      bool   // acked or dropped: skipped, and removed at the front
	mem       []byte // the encoded report when it is not on disk
	// fresh is the report as Add was given it, until After hands it to the
	// uplink: the way out of a report sent at once, which would otherwise
	// be read back from its file and decoded (a quarter of an idle agent's
	// CPU with the encodings). Only up to maxFresh bytes of reports are
	// held so; the rest, and a report sent again, are read back. enc is
	// its encoding, which the uplink sends as it is.
	fresh *nbsv1.Report
	enc   []byte
}

// Sending is a report on its way to the collector: the report, and its
// encoding (proto.Marshal's), which the uplink sends rather than encode
// it again.
type Sending struct {
	Report  *nbsv1.Report
	Encoded []byte
}

// maxFresh bounds the encoded bytes of the reports held decoded (entry.fresh)
// for their first sending, so that a collector out of reach does not keep
// the spool's backlog in memory too; and at most maxFreshReports of them.
const maxFresh = 1 << 20

// maxFreshReports bounds how many reports are held decoded for their first
// sending: the uplink takes a report as soon as it is added, so one is
// held at a time while the stream is up. While it is down they were held
// up to maxFresh (25 reports of an idle node, each decoded and encoded
// about 4.5 times its encoding: 26.9 MiB peak resident memory against
// 23.2), and a resend after the outage reads most of them back anyway.
const maxFreshReports = 2

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
	fresh    int64 // encoded bytes of the entries holding fresh
	freshN   int   // entries holding fresh
	// frame is writeReport's buffer, kept for the next report unless it
	// grew past maxFrameKept: each report was a copy of it in
	// garbage, the largest part of an idle agent's after the encoding.
	frame []byte
}

// maxFrameKept bounds the frame buffer kept between reports.
const maxFrameKept = 256 << 10

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
	if opts.Describe == nil {
		opts.Describe = func(string) (*nbsv1.MetricDefinition, bool) { return nil, false }
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

// Add holds a report until the collector acks it, giving it the next
// sequence, or its parts consecutive ones when it is too large to send as
// one. The report's own Sequence is ignored. When the spool is on disk the
// report is durable before Add returns; when a disk write fails it is kept
// in memory instead, lost only if the agent stops before it is delivered.
func (s *Spool) Add(r *nbsv1.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := wire.MetricIDs(r)
	// Before the report: a replay must never find a report without them.
	s.define(used)
	s.store(s.split(r, used))
}

// store gives the reports consecutive sequences (setting their Sequence),
// writes them and applies the bounds.
func (s *Spool) store(reports []*nbsv1.Report) {
	if len(reports) == 0 {
		return
	}
	if s.dir != nil {
		if err := s.reserve(len(reports)); err != nil {
			s.loseState(err)
		}
	}
	wrote := false
	for _, r := range reports {
		r.Sequence = s.next
		s.next++
		// split has just sized every message in r (proto.Size of the
		// report or of each entry), and nothing in it changed since but
		// the report's own sequence: the encoding reuses those sizes
		// rather than size it all again (an event's fields, a map, were
		// sized through reflection on every pass). The report's own size
		// is stale by the sequence (its tag and at most 10 bytes): the
		// buffer has room for them, or the last append would double it
		// (as much garbage again as the report, every report).
		enc := proto.MarshalOptions{UseCachedSize: true}
		b, err := enc.MarshalAppend(make([]byte, 0, enc.Size(r)+1+binary.MaxVarintLen64), r)
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
		if s.freshN < maxFreshReports && s.fresh+e.size <= maxFresh {
			e.fresh, e.enc = r, b
			s.fresh += e.size
			s.freshN++
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
	s.unfresh(e)
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
// when a report is added.
func (s *Spool) After(seq uint64, maxBytes int64) ([]*nbsv1.Report, <-chan struct{}) {
	held, more := s.Take(seq, maxBytes)
	out := make([]*nbsv1.Report, len(held))
	for i, h := range held {
		out[i] = h.Report
	}
	return out, more
}

// Take is After with each report's encoding.
func (s *Spool) Take(seq uint64, maxBytes int64) ([]Sending, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sending
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
		h := Sending{Report: e.fresh, Encoded: e.enc}
		if h.Report != nil {
			// Handed over: the uplink holds it until it is sent, and a
			// second sending reads it back like any other.
			s.unfresh(e)
		} else {
			var err error
			if h.Report, h.Encoded, err = s.report(e); err != nil {
				s.log.Error("spool: dropping a report that cannot be read back", "seq", e.seq, "err", err)
				unreadable = append(unreadable, e.seq)
				continue
			}
		}
		out = append(out, h)
		total += e.size
	}
	return out, s.changed
}

// unfresh forgets an entry's decoded report (entry.fresh).
func (s *Spool) unfresh(e *entry) {
	if e.fresh != nil {
		s.fresh -= e.size
		s.freshN--
		e.fresh, e.enc = nil, nil
	}
}

// report reads an entry's report back, with its encoding.
func (s *Spool) report(e *entry) (*nbsv1.Report, []byte, error) {
	if e.mem != nil {
		r := &nbsv1.Report{}
		if err := proto.Unmarshal(e.mem, r); err != nil {
			return nil, nil, err
		}
		return r, e.mem, nil
	}
	return readReport(s.opts.Dir, e.seq)
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
// trimmed or dropped by the bounds, too large to send at all, or discarded
// as undeliverable.
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

func isChild(id string) bool { return schema.Parent(id) != "" }

func items(r *nbsv1.Report) int {
	return len(r.GetSamples()) + len(r.GetHistograms()) + len(r.GetEvents())
}

func hasChildren(r *nbsv1.Report) bool {
	for _, id := range wire.MetricIDs(r) {
		if isChild(id) {
			return true
		}
	}
	return false
}
