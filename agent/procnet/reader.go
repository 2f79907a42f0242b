package procnet

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
)

// The files a Reader reads, as seen from inside a namespace:
// /proc/thread-self, not /proc/self, which follows the process's main thread
// (see netns.Handle.ReadFile).
const (
	SNMPPath    = "/proc/thread-self/net/snmp"
	NetstatPath = "/proc/thread-self/net/netstat"
	SNMP6Path   = "/proc/thread-self/net/snmp6"
)

// Reader reads one namespace's SNMP counter files for every source that
// needs them. Several sources count from the same files each interval; a
// Reader shared between them reads and parses each file once per cycle, a
// cycle running from one call of Next to the next, and hands every source
// the same counters. Until Next is first called, each call reads afresh: a
// source used on its own gets fresh counters on every collection.
type Reader struct {
	read func(path string) ([]byte, error)

	mu    sync.Mutex
	keys  keys // the names read, interned
	cycle uint64
	snmp  snapshot
	snmp6 snapshot
}

type snapshot struct {
	cycle uint64 // 0: never read
	c     Counters
	err   error
}

// NewReader reads files through read, such as netns.Handle.ReadFile.
func NewReader(read func(path string) ([]byte, error)) *Reader {
	return &Reader{read: read}
}

// Next starts a new cycle: each file is read again when next asked for.
func (r *Reader) Next() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cycle++
}

// SNMP returns /proc/net/snmp and /proc/net/netstat in one map
// ("Tcp.OutRsts", "TcpExt.TCPTimeouts"). Sources share the map: they must
// not change it.
func (r *Reader) SNMP() (Counters, error) {
	return r.get(&r.snmp, func() (Counters, error) {
		c := make(Counters, len(r.snmp.c))
		for _, f := range []string{SNMPPath, NetstatPath} {
			if err := r.parse(f, parseInto, c); err != nil {
				return nil, err
			}
		}
		return c, nil
	})
}

// SNMP6 returns /proc/net/snmp6 ("Udp6.NoPorts"), empty where IPv6 is
// disabled and the file does not exist. Sources share the map: they must
// not change it.
func (r *Reader) SNMP6() (Counters, error) {
	return r.get(&r.snmp6, func() (Counters, error) {
		c := make(Counters, len(r.snmp6.c))
		if err := r.parse(SNMP6Path, parseSNMP6Into, c); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return Counters{}, nil
			}
			return nil, err
		}
		return c, nil
	})
}

// get returns s's counters of this cycle, reading them if the cycle has
// none yet. A failed read fails every caller of the cycle alike.
func (r *Reader) get(s *snapshot, read func() (Counters, error)) (Counters, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cycle == 0 || s.cycle != r.cycle {
		s.c, s.err = read()
		s.cycle = r.cycle
	}
	return s.c, s.err
}

func (r *Reader) parse(path string, parse func([]byte, Counters, *keys) error, c Counters) error {
	data, err := r.read(path)
	if err != nil {
		return err
	}
	if err := parse(data, c, &r.keys); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}
