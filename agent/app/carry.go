package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"

	"github.com/nbs-project/nbs/agent/spool"
)

// carryName is the file in the spool directory that says which cumulative
// counter values the reports so far carry.
const carryName = "counted.json"

// maxCarryBytes bounds what is read back of the file: it is this agent's
// own, but a damaged one must not take the agent's memory (a counter id is
// at most a few hundred bytes, and a node has hundreds to a few thousand).
const maxCarryBytes = 16 << 20

// carry keeps, across agent restarts, the cumulative value of every counter
// as of the last report the outbox took, so that an agent whose probes
// adopted the pinned maps of the previous one (source.Continuing) counts
// from there: the first report after a restart holds what was counted since
// the previous agent's last report — after it, while no agent ran, and
// before the new one's first collection — exactly once.
//
// The file is written twice per report: before the outbox takes it, with
// the new values as pending (and the report's time), and after, with them
// as counted. A restart that finds a pending write looks in the spool for
// that report: there, the values count; absent, it never got in, and the
// previous ones do. (The one case this misses is a report that got in, was
// sent and acked within the write that follows Add: its values are then
// counted twice.)
//
// Pins do not survive a reboot; the spool does. After a reboot no probe
// continues, so the file is not used: counters start from the first
// collection, as they always did.
type carry struct {
	path string // "" when the spool is in memory: nothing is carried
	node string
	log  *slog.Logger
	last carryFile // as written last
}

type carryFile struct {
	Node    string            `json:"node"`
	Counted map[string]uint64 `json:"counted"`
	// PendingTime is the time (Unix ns) of the report the outbox is taking
	// with the values Pending; 0 when none is.
	PendingTime int64             `json:"pending_time,omitempty"`
	Pending     map[string]uint64 `json:"pending,omitempty"`
}

func newCarry(spoolDir, node string, log *slog.Logger) *carry {
	c := &carry{node: node, log: log}
	if spoolDir != "" {
		c.path = filepath.Join(spoolDir, carryName)
	}
	return c
}

// restore returns the counter values the previous agent's reports carry,
// nil when there is no record of them (first start, another node's file,
// or a spool in memory).
func (c *carry) restore(out *spool.Spool) map[string]uint64 {
	if c.path == "" {
		return nil
	}
	f, err := readCarry(c.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		c.log.Warn("cannot read which counts the previous agent reported; counting from this agent's start", "file", c.path, "err", err)
		return nil
	case f.Node != c.node:
		c.log.Warn("counted.json is another node's; counting from this agent's start", "file", c.path, "file_node", f.Node, "node", c.node)
		return nil
	}
	if f.PendingTime != 0 && spooled(out, f.PendingTime) {
		return f.Pending
	}
	return f.Counted
}

func readCarry(path string) (carryFile, error) {
	var f carryFile
	r, err := os.Open(path)
	if err != nil {
		return f, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxCarryBytes+1))
	if err != nil {
		return f, err
	}
	if len(b) > maxCarryBytes {
		return f, fmt.Errorf("larger than %d bytes", maxCarryBytes)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("decode: %w", err)
	}
	return f, nil
}

// spooled says whether the outbox holds a report made at t.
func spooled(out *spool.Spool, t int64) bool {
	held, _ := out.After(0, math.MaxInt64)
	for _, r := range held {
		if r.GetTimeUnixNano() == t {
			return true
		}
	}
	return false
}

// start records the values the reports carry when this agent starts
// (its baseline), in one write.
func (c *carry) start(counters map[string]uint64) {
	c.last = carryFile{Counted: maps.Clone(counters)}
	c.write()
}

// pending records the values of the report made at t before the outbox
// takes it.
func (c *carry) pending(t int64, counters map[string]uint64) {
	c.last.Pending, c.last.PendingTime = maps.Clone(counters), t
	c.write()
}

// commit records that the outbox took the pending report.
func (c *carry) commit() {
	c.last.Counted, c.last.Pending, c.last.PendingTime = c.last.Pending, nil, 0
	c.write()
}

// write replaces the file. A rename is atomic, and no fsync is needed: the
// file matters only while the pinned maps live, which a crash of the
// machine ends too.
func (c *carry) write() {
	if c.path == "" {
		return
	}
	c.last.Node = c.node
	b, err := json.Marshal(c.last)
	if err == nil {
		tmp := c.path + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, c.path)
		}
	}
	if err != nil {
		c.log.Warn("cannot record which counts were reported; a restart will not report what was counted while no agent ran", "file", c.path, "err", err)
	}
}

// forget removes the file (uninstall: the pins it refers to are gone).
func (c *carry) forget() error {
	if c.path == "" {
		return nil
	}
	if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
