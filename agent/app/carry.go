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
	"slices"
	"strconv"
	"strings"

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
// continues, so the file's values of pinned counters are not used.
//
// The kernel's own counters (/proc, source.SinceBoot) survive an agent
// restart by themselves: their values are recorded as the kernel has them,
// since boot, with the boot (boot_id) and the namespace they were read in,
// so the next agent continues them only on the same boot and namespace.
type carry struct {
	path string // "" when the spool is in memory: nothing is carried
	node string
	here origin
	log  *slog.Logger
	// counted and pending are the file's counted and pending values,
	// encoded (json.Marshal's map encoding) when they were recorded: each
	// report's values are encoded once, where writing them as maps
	// encoded them three times (pending, then counted twice), the largest
	// part of an idle agent's garbage after the reports themselves.
	countedJSON, pendingJSON json.RawMessage
	pendingTime              int64
	// sinceBoot are the counters whose values are the kernel's since boot
	// (the ledger's set, read at each write).
	sinceBoot map[string]bool
	// What the file is written from, kept from write to write: the
	// counters' keys as last encoded (sorted, as json.Marshal sorts a
	// map's) with each key encoded, since_boot encoded, and the file's
	// buffer. The counters are the same from report to report but for a
	// metric that comes or goes, and json.Marshal sorted and encoded them
	// all (through reflect) twice a report.
	keys      keyCodec
	sinceKeys keyCodec
	sinceJSON []byte
	buf       []byte
}

// keyCodec holds a map's keys sorted and JSON-encoded, for maps with the
// same keys, which is what they have from one report to the next.
type keyCodec struct {
	sorted  []string
	encoded [][]byte
}

// use makes the codec the keys of m, unless it is already, and says
// whether it changed.
func use[V any](k *keyCodec, m map[string]V) (changed bool) {
	if len(k.sorted) == len(m) {
		same := true
		for _, key := range k.sorted {
			if _, ok := m[key]; !ok {
				same = false
				break
			}
		}
		if same && k.sorted != nil {
			return false
		}
	}
	k.sorted = slices.Sorted(maps.Keys(m))
	k.encoded = k.encoded[:0]
	for _, key := range k.sorted {
		b, _ := json.Marshal(key) // a string always encodes
		k.encoded = append(k.encoded, b)
	}
	return true
}

// origin is where the kernel's own counters an agent reads come from.
type origin struct {
	// Boot is the kernel's boot_id; "" when unknown.
	Boot string
	// Netns is the inode of the namespace the agent reads /proc in.
	Netns uint32
}

// bootIDPath is the kernel's random id of this boot.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// readBootID returns this boot's id, "" (unknown: the kernel's counters
// then never continue a previous agent's) when it cannot be read.
func readBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

type carryFile struct {
	Node    string            `json:"node"`
	Counted map[string]uint64 `json:"counted"`
	// PendingTime is the time (Unix ns) of the report the outbox is taking
	// with the values Pending; 0 when none is.
	PendingTime int64             `json:"pending_time,omitempty"`
	Pending     map[string]uint64 `json:"pending,omitempty"`
	// BootID and Netns say where the SinceBoot counters were read; a file
	// without them (an older agent's) is of an unknown boot.
	BootID    string   `json:"boot_id,omitempty"`
	Netns     uint32   `json:"netns,omitempty"`
	SinceBoot []string `json:"since_boot,omitempty"`
}

// carryOut is carryFile as carry writes it, with its maps encoded already.
type carryOut struct {
	Node        string          `json:"node"`
	Counted     json.RawMessage `json:"counted"`
	PendingTime int64           `json:"pending_time,omitempty"`
	Pending     json.RawMessage `json:"pending,omitempty"`
	BootID      string          `json:"boot_id,omitempty"`
	Netns       uint32          `json:"netns,omitempty"`
	SinceBoot   []string        `json:"since_boot,omitempty"`
}

// carried is what the previous agent's reports carry.
type carried struct {
	// counted are the counter values; nil when there is no record (first
	// start, another node's file, or a spool in memory).
	counted map[string]uint64
	// from is where its kernel counters were read, sinceBoot which they
	// are.
	from      origin
	sinceBoot map[string]bool
}

func newCarry(spoolDir, node string, here origin, log *slog.Logger) *carry {
	c := &carry{node: node, here: here, log: log}
	if spoolDir != "" {
		c.path = filepath.Join(spoolDir, carryName)
	}
	return c
}

// restore returns what the previous agent's reports carry.
func (c *carry) restore(out *spool.Spool) carried {
	if c.path == "" {
		return carried{}
	}
	f, err := readCarry(c.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return carried{}
	case err != nil:
		c.log.Warn("cannot read which counts the previous agent reported; counting from this agent's start", "file", c.path, "err", err)
		return carried{}
	case f.Node != c.node:
		c.log.Warn("counted.json is another node's; counting from this agent's start", "file", c.path, "file_node", f.Node, "node", c.node)
		return carried{}
	}
	r := carried{counted: f.Counted, from: origin{Boot: f.BootID, Netns: f.Netns}, sinceBoot: make(map[string]bool, len(f.SinceBoot))}
	if f.PendingTime != 0 && spooled(out, f.PendingTime) {
		r.counted = f.Pending
	}
	for _, id := range f.SinceBoot {
		r.sinceBoot[id] = true
	}
	return r
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
// (its baseline), in one write; sinceBoot is the ledger's set of the
// kernel's own counters, read again at every write.
func (c *carry) start(counters map[string]uint64, sinceBoot map[string]bool) {
	c.countedJSON, c.pendingJSON, c.pendingTime = c.encode(counters), nil, 0
	c.sinceBoot = sinceBoot
	c.write()
}

// pending records the values of the report made at t before the outbox
// takes it.
func (c *carry) pending(t int64, counters map[string]uint64) {
	c.pendingJSON, c.pendingTime = c.encode(counters), t
	c.write()
}

// commit records that the outbox took the pending report.
func (c *carry) commit() {
	c.countedJSON, c.pendingJSON, c.pendingTime = c.pendingJSON, nil, 0
	c.write()
}

// encode is counters as the file holds them (as json.Marshal encodes the
// map); nil (the file then is not written) when the spool is in memory.
func (c *carry) encode(counters map[string]uint64) json.RawMessage {
	if c.path == "" {
		return nil
	}
	if counters == nil {
		return json.RawMessage("null")
	}
	use(&c.keys, counters)
	n := 2
	for _, k := range c.keys.encoded {
		n += len(k) + 22
	}
	b := append(make([]byte, 0, n), '{')
	for i, k := range c.keys.sorted {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(b, c.keys.encoded[i]...), ':')
		b = strconv.AppendUint(b, counters[k], 10)
	}
	return append(b, '}')
}

// write replaces the file. A rename is atomic, and no fsync is needed: the
// file matters only while the pinned maps live, which a crash of the
// machine ends too.
func (c *carry) write() {
	if c.path == "" {
		return
	}
	pending := c.pendingJSON
	if string(pending) == "{}" || string(pending) == "null" {
		pending = nil // omitted, as carryFile's empty map is (omitempty)
	}
	b := c.appendFile(c.buf[:0], pending)
	c.buf = b
	tmp := c.path + ".tmp"
	err := os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		c.log.Warn("cannot record which counts were reported; a restart will not report what was counted while no agent ran", "file", c.path, "err", err)
	}
}

// appendFile appends the file's bytes: json.Marshal's encoding of
// carryOut, written out (TestCarryFileFormat holds them equal).
func (c *carry) appendFile(b []byte, pending json.RawMessage) []byte {
	str := func(b []byte, s string) []byte {
		e, _ := json.Marshal(s) // a string always encodes
		return append(b, e...)
	}
	b = str(append(b, `{"node":`...), c.node)
	b = append(b, `,"counted":`...)
	if c.countedJSON == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, c.countedJSON...)
	}
	if c.pendingTime != 0 {
		b = strconv.AppendInt(append(b, `,"pending_time":`...), c.pendingTime, 10)
	}
	if len(pending) > 0 {
		b = append(append(b, `,"pending":`...), pending...)
	}
	if c.here.Boot != "" {
		b = str(append(b, `,"boot_id":`...), c.here.Boot)
	}
	if c.here.Netns != 0 {
		b = strconv.AppendUint(append(b, `,"netns":`...), uint64(c.here.Netns), 10)
	}
	if len(c.sinceBoot) > 0 {
		if use(&c.sinceKeys, c.sinceBoot) || c.sinceJSON == nil {
			c.sinceJSON = append(c.sinceJSON[:0], '[')
			for i, k := range c.sinceKeys.encoded {
				if i > 0 {
					c.sinceJSON = append(c.sinceJSON, ',')
				}
				c.sinceJSON = append(c.sinceJSON, k...)
			}
			c.sinceJSON = append(c.sinceJSON, ']')
		}
		b = append(append(b, `,"since_boot":`...), c.sinceJSON...)
	}
	return append(b, '}')
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
