package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/wire"
)

// seqReserve sequences are recorded in the state file at a time.
const seqReserve = 1024

// load takes the directory over from an earlier agent: it locks it, drops
// writes that never completed, and replays its reports under its instance
// when they are this node's.
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
		r, b, err := readReport(dir, seq)
		if err != nil {
			s.log.Warn("spool: skipping a damaged report", "seq", seq, "err", err)
			_ = os.Remove(s.reportPath(seq))
			s.dropped++ // its samples cannot be counted; it held at least one
			continue
		}
		s.push(entry{seq: seq, size: int64(len(b)) + frameHeader, items: items(r), rootsOnly: !hasChildren(r)})
		for _, id := range wire.MetricIDs(r) {
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

// reserve makes sure the next n sequences are recorded in the state file
// before they are handed out, so a restarted agent never reuses one.
func (s *Spool) reserve(n int) error {
	if s.next+uint64(n)-1 <= s.reserved {
		return nil
	}
	upTo := s.next + uint64(n) - 1 + seqReserve
	if err := writeState(s.opts.Dir, state{instance: s.instance, reserved: upTo, node: s.opts.Node}); err != nil {
		return err
	}
	if err := s.dir.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	s.reserved = upTo
	return nil
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

func (s *Spool) reportPath(seq uint64) string { return filepath.Join(s.opts.Dir, reportName(seq)) }

func (s *Spool) writeReport(seq uint64, b []byte) bool {
	s.frame = appendFrame(s.frame[:0], magicReport, b)
	err := writeAtomic(s.opts.Dir, reportName(seq), s.frame)
	if cap(s.frame) > maxFrameKept {
		s.frame = nil
	}
	if err != nil {
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
