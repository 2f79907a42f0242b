package push

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/snappy"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/export"
)

// A queue keeps one receiver's snapshots on disk, oldest first, until its
// shipper has sent them: one file a snapshot, written to a temporary name,
// fsync'd and renamed, so a crash leaves either the whole record or none
// of it. A record that is short or fails its checksum anyway (a disk that
// lied about fsync, a file cut by hand) is found when the queue opens or
// reads it, dropped and counted.
//
// Record: magic "NBQ1", CRC-32C of the rest, Now (Unix µs, 8 bytes),
// samples (4), payload length (4), payload: snappy of the families, each
// length-delimited protobuf (client_model's MetricFamily).
type queue struct {
	dir      string
	maxBytes int64

	mu      sync.Mutex
	entries []entry
	bytes   int64
	next    uint64
	// wake is poked when a record is appended.
	wake chan struct{}
	// dropped counts what the queue itself dropped, by reason (full,
	// corrupt), in samples; the pusher's metrics read it.
	dropped func(reason string, samples int)
}

type entry struct {
	seq     uint64
	size    int64
	samples int
	now     time.Time
}

const (
	recordMagic  = "NBQ1"
	headerSize   = 4 + 4 + 8 + 4 + 4
	recordSuffix = ".snap"
	tmpPrefix    = ".tmp-"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a record that cannot be read back; errGone one that the
// bound dropped (as the oldest) while it was being shipped.
var (
	errCorrupt = errors.New("corrupt queue record")
	errGone    = errors.New("queue record dropped as the oldest of a full queue")
)

// openQueue opens (making it if needed) the queue in dir, checks every
// record and drops those that are torn.
func openQueue(dir string, maxBytes int64, dropped func(reason string, samples int)) (*queue, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make queue directory: %w", err)
	}
	q := &queue{dir: dir, maxBytes: maxBytes, wake: make(chan struct{}, 1), dropped: dropped}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read queue directory: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			// A write the process did not finish: never acknowledged.
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		seqText, ok := strings.CutSuffix(name, recordSuffix)
		if !ok {
			continue
		}
		seq, err := strconv.ParseUint(seqText, 10, 64)
		if err != nil {
			continue
		}
		e, err := q.check(seq)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				return nil, err
			}
			q.dropped("corrupt", e.samples)
			_ = os.Remove(q.path(seq))
			continue
		}
		q.entries = append(q.entries, e)
		q.bytes += e.size
	}
	slices.SortFunc(q.entries, func(a, b entry) int { return compareSeq(a.seq, b.seq) })
	if n := len(q.entries); n > 0 {
		q.next = q.entries[n-1].seq + 1
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	return q, nil
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (q *queue) path(seq uint64) string {
	return filepath.Join(q.dir, fmt.Sprintf("%020d%s", seq, recordSuffix))
}

// check reads a record whole and verifies it.
func (q *queue) check(seq uint64) (entry, error) {
	b, err := os.ReadFile(q.path(seq))
	if err != nil {
		return entry{seq: seq}, fmt.Errorf("read queue record: %w", err)
	}
	e, _, err := parseRecord(b)
	e.seq = seq
	return e, err
}

// parseRecord checks a record and returns its entry and payload.
func parseRecord(b []byte) (entry, []byte, error) {
	var e entry
	if len(b) < headerSize || string(b[:4]) != recordMagic {
		return e, nil, fmt.Errorf("%w: short or without its header (%d bytes)", errCorrupt, len(b))
	}
	e.now = time.UnixMicro(int64(binary.BigEndian.Uint64(b[8:16]))).UTC()
	e.samples = int(binary.BigEndian.Uint32(b[16:20]))
	n := int(binary.BigEndian.Uint32(b[20:24]))
	if len(b) != headerSize+n {
		return e, nil, fmt.Errorf("%w: %d bytes, its header says %d", errCorrupt, len(b), headerSize+n)
	}
	if crc32.Checksum(b[8:], castagnoli) != binary.BigEndian.Uint32(b[4:8]) {
		return e, nil, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	e.size = int64(len(b))
	return e, b[headerSize:], nil
}

// encodeRecord is the record of snap.
func encodeRecord(snap export.Snapshot) ([]byte, int, error) {
	var raw []byte
	samples := 0
	for _, mf := range snap.Families {
		samples += len(mf.Metric)
		m, err := proto.Marshal(mf)
		if err != nil {
			return nil, 0, fmt.Errorf("encode family %s: %w", mf.GetName(), err)
		}
		raw = protowire.AppendBytes(raw, m)
	}
	payload := snappy.Encode(nil, raw)
	if len(payload) > math.MaxUint32-headerSize {
		return nil, 0, errors.New("snapshot too large for one queue record")
	}
	b := make([]byte, headerSize, headerSize+len(payload))
	copy(b, recordMagic)
	binary.BigEndian.PutUint64(b[8:16], uint64(snap.Now.UnixMicro()))
	binary.BigEndian.PutUint32(b[16:20], uint32(samples))
	binary.BigEndian.PutUint32(b[20:24], uint32(len(payload)))
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[8:], castagnoli))
	return b, samples, nil
}

// decodeRecord is the snapshot of a record (its Stats are not kept).
func decodeRecord(b []byte) (export.Snapshot, error) {
	e, payload, err := parseRecord(b)
	if err != nil {
		return export.Snapshot{}, err
	}
	raw, err := snappy.Decode(nil, payload)
	if err != nil {
		return export.Snapshot{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	snap := export.Snapshot{Now: e.now}
	for len(raw) > 0 {
		m, n := protowire.ConsumeBytes(raw)
		if n < 0 {
			return export.Snapshot{}, fmt.Errorf("%w: bad family framing", errCorrupt)
		}
		mf := &dto.MetricFamily{}
		if err := proto.Unmarshal(m, mf); err != nil {
			return export.Snapshot{}, fmt.Errorf("%w: %v", errCorrupt, err)
		}
		snap.Families = append(snap.Families, mf)
		raw = raw[n:]
	}
	return snap, nil
}

// errTooLarge: one snapshot larger than the whole queue.
var errTooLarge = errors.New("snapshot larger than --export.queue-max-bytes")

// append writes snap behind the others, durably, first dropping the
// oldest records while the queue would outgrow its bound.
func (q *queue) append(snap export.Snapshot) error {
	b, samples, err := encodeRecord(snap)
	if err != nil {
		return err
	}
	if int64(len(b)) > q.maxBytes {
		q.dropped("full", samples)
		return fmt.Errorf("%w: %d bytes, the bound is %d", errTooLarge, len(b), q.maxBytes)
	}
	q.mu.Lock()
	seq := q.next
	q.next++
	var drop []entry
	for q.bytes+int64(len(b)) > q.maxBytes && len(q.entries) > 0 {
		drop = append(drop, q.entries[0])
		q.bytes -= q.entries[0].size
		q.entries = q.entries[1:]
	}
	q.mu.Unlock()
	for _, e := range drop {
		q.dropped("full", e.samples)
		if err := os.Remove(q.path(e.seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("drop the oldest queue record: %w", err)
		}
	}
	tmp := filepath.Join(q.dir, fmt.Sprintf("%s%020d", tmpPrefix, seq))
	if err := writeSync(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, q.path(seq)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("queue record: %w", err)
	}
	if err := syncDir(q.dir); err != nil {
		return err
	}
	q.mu.Lock()
	q.entries = append(q.entries, entry{seq: seq, size: int64(len(b)), samples: samples, now: snap.Now})
	q.bytes += int64(len(b))
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

func writeSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("queue record: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("write queue record: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync queue directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync queue directory: %w", err)
	}
	return nil
}

// head is the oldest record, if any.
func (q *queue) head() (entry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.entries) == 0 {
		return entry{}, false
	}
	return q.entries[0], true
}

// read loads a record; a corrupt one is errCorrupt.
func (q *queue) read(e entry) (export.Snapshot, error) {
	b, err := os.ReadFile(q.path(e.seq))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return export.Snapshot{}, errGone
		}
		return export.Snapshot{}, fmt.Errorf("read queue record: %w", err)
	}
	return decodeRecord(b)
}

// remove deletes a record the shipper is done with (sent, or dropped).
func (q *queue) remove(e entry) error {
	q.mu.Lock()
	i := slices.IndexFunc(q.entries, func(x entry) bool { return x.seq == e.seq })
	if i >= 0 {
		q.bytes -= q.entries[i].size
		q.entries = slices.Delete(q.entries, i, i+1)
	}
	q.mu.Unlock()
	if err := os.Remove(q.path(e.seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove queue record: %w", err)
	}
	return syncDir(q.dir)
}

// stats is what the metrics show: bytes, records, and the oldest record's
// snapshot time (zero when empty).
func (q *queue) stats() (bytes int64, records int, oldest time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.entries) > 0 {
		oldest = q.entries[0].now
	}
	return q.bytes, len(q.entries), oldest
}
