package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const (
	// maxDefinitionsBytes bounds what is read of the definitions file: far
	// more than the collector's 20,000 metrics per node take.
	maxDefinitionsBytes = 256 << 20
	// minDefinitions is how many definitions are kept before unused ones
	// are pruned (they are pruned again each time their number doubles).
	minDefinitions = 1024
)

// definition is a recorded definition of a metric some report used.
type definition struct {
	def      *nbsv1.MetricDefinition
	size     int
	lastUsed uint64 // the first sequence of the last report using it
}

// define records the definitions of the metrics a report about to be stored
// uses (and of their ancestors), so a replay after a restart can announce
// metrics the new agent does not know (anymore). Only ids not yet recorded
// are looked up.
func (s *Spool) define(ids []string) {
	var buf []byte
	for _, id := range ids {
		for p := id; p != ""; p = schema.Parent(p) {
			if d := s.defs[p]; d != nil {
				d.lastUsed = s.next
				continue
			}
			def, ok := s.opts.Describe(p)
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

// loadDefinitions reads the definitions file up to its first damaged frame
// and rewrites it with only the definitions the spooled reports use: used
// gives, for each, the last report using it.
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

// Definition returns the recorded definition of a metric some held report
// uses, for a replay the current agent cannot describe itself.
func (s *Spool) Definition(id string) (*nbsv1.MetricDefinition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.defs[id]; d != nil {
		return d.def, true
	}
	return nil, false
}

// definitionSize is the encoded size of a recorded definition (0 if none).
func (s *Spool) definitionSize(id string) int {
	if d := s.defs[id]; d != nil {
		return d.size
	}
	return 0
}
