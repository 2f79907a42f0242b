package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The files of a spool directory (the package comment says what each holds).
const (
	lockName        = "lock"
	stateName       = "state"
	definitionsName = "definitions"
	reportSuffix    = ".report"
	tmpSuffix       = ".tmp"
)

// Every file in the spool is made of frames: a 4-byte magic naming what the
// frame holds, the payload's length and its CRC-32C (both little-endian
// uint32), then the payload. A write torn by kill -9 or a power loss leaves a
// short frame or one whose CRC does not match; readers stop there.
const (
	frameHeader = 12
	// maxPayload bounds what a reader allocates for a frame: a report part
	// is at most a few MiB, so anything larger is damage, not data.
	maxPayload = 64 << 20
)

var (
	magicReport     = [4]byte{'N', 'B', 'S', 'R'}
	magicDefinition = [4]byte{'N', 'B', 'S', 'D'}
	magicState      = [4]byte{'N', 'B', 'S', 'S'}

	castagnoli = crc32.MakeTable(crc32.Castagnoli)

	errTorn = errors.New("torn or damaged frame")
)

func appendFrame(dst []byte, magic [4]byte, payload []byte) []byte {
	dst = append(dst, magic[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(payload, castagnoli))
	return append(dst, payload...)
}

// readFrame decodes the frame at the start of b and returns its payload and
// the frame's whole length. Any damage is errTorn.
func readFrame(b []byte, magic [4]byte) (payload []byte, n int, err error) {
	if len(b) < frameHeader || [4]byte(b[:4]) != magic {
		return nil, 0, errTorn
	}
	size := binary.LittleEndian.Uint32(b[4:8])
	if size > maxPayload || uint64(len(b)-frameHeader) < uint64(size) {
		return nil, 0, errTorn
	}
	payload = b[frameHeader : frameHeader+int(size)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[8:12]) {
		return nil, 0, errTorn
	}
	return payload, frameHeader + int(size), nil
}

// readWhole reads a file that must be exactly one frame.
func readWhole(path string, magic [4]byte) ([]byte, error) {
	b, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	payload, n, err := readFrame(b, magic)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if n != len(b) {
		return nil, fmt.Errorf("%s: %d bytes after the frame: %w", filepath.Base(path), len(b)-n, errTorn)
	}
	return payload, nil
}

// readLimited reads a file of at most one frame's maximum size (and one
// byte more, for readWhole to see it is too long).
func readLimited(path string) ([]byte, error) { return readUpTo(path, frameHeader+maxPayload+1) }

// readUpTo reads at most n bytes of a file.
func readUpTo(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Base(path), err)
	}
	return b, nil
}

// writeAtomic replaces dir/name with data so that after a crash the file is
// either the old one or the new one, never a mix: a temporary file is
// written and fsync'd, then renamed over the old one. The caller fsyncs the
// directory to make the rename itself durable.
func writeAtomic(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, filepath.Join(dir, name))
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, werr)
	}
	return nil
}

// state is what the state file records.
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

func writeState(dir string, st state) error {
	payload := binary.LittleEndian.AppendUint64(nil, st.instance)
	payload = binary.LittleEndian.AppendUint64(payload, st.reserved)
	payload = append(payload, st.node...)
	return writeAtomic(dir, stateName, appendFrame(nil, magicState, payload))
}

func reportName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, reportSuffix) }

// readReport reads the report file of seq, which must hold that sequence:
// a file renamed by hand is damage, not a report to replay.
func readReport(dir string, seq uint64) (*nbsv1.Report, []byte, error) {
	b, err := readWhole(filepath.Join(dir, reportName(seq)), magicReport)
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
