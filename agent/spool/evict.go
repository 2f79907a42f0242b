package spool

import (
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// fullness collects what the bounds cost, logged at most once a minute.
type fullness struct {
	trimmed, reports int
	samples          uint64
	logged           time.Time
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
	// Trimmed from its encoding: the decoded one may be on its way out.
	s.unfresh(e)
	r, _, err := s.report(e)
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
