package drops

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// ksymBatch and ksymLen are NBS_KSYM_BATCH and NBS_KSYM_LEN of
// bpf/ksym.bpf.c.
const (
	ksymBatch = 16
	ksymLen   = 128
)

// ksyms names the kernel code that dropped a packet (the tracepoint's
// location, a return address) as "function+0xoff", with the kernel's own
// symbol lookup run by a BPF program on demand (bpf/ksym.bpf.c).
//
// It used to scan /proc/kallsyms, which costs the kernel ~70 ms of CPU per
// read (it formats 120k symbols) and was half of the agent's start-up CPU:
// a node drops packets from its first interval on. Drop sites are few, so
// names are still cached per address.
type ksyms struct {
	mu    sync.Mutex
	objs  ksymObjects
	cache map[uint64]string // "" = looked up, not found
	err   error             // why names are off: the program did not load or run
}

// newKsyms loads the symbol lookup; if it cannot, every address goes
// unnamed and err says why.
func newKsyms(opts *ebpf.CollectionOptions) *ksyms {
	k := &ksyms{cache: map[uint64]string{}}
	if err := loadKsymObjects(&k.objs, opts); err != nil {
		k.err = fmt.Errorf("load kernel symbol lookup: %w", err)
	}
	return k
}

// names returns "func+0xoff" for each address it can name, running the
// lookup for the addresses not seen before.
func (k *ksyms) names(addrs []uint64) map[uint64]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var missed []uint64
	for _, a := range addrs {
		if _, ok := k.cache[a]; !ok && a != 0 {
			missed = append(missed, a)
		}
	}
	for len(missed) > 0 && k.err == nil {
		n := min(len(missed), ksymBatch)
		if err := k.lookup(missed[:n]); err != nil {
			k.err = err
		}
		missed = missed[n:]
	}
	out := make(map[uint64]string, len(addrs))
	for _, a := range addrs {
		if s := k.cache[a]; s != "" {
			out[a] = s
		}
	}
	return out
}

// lookup names up to ksymBatch addresses into the cache.
func (k *ksyms) lookup(want []uint64) error {
	var in [ksymBatch]uint64
	copy(in[:], want)
	if err := k.objs.KsymAddr.Set(in); err != nil {
		return fmt.Errorf("set ksym_addr: %w", err)
	}
	if _, err := k.objs.NbsKsym.Run(&ebpf.RunOptions{}); err != nil {
		return fmt.Errorf("run kernel symbol lookup: %w", err)
	}
	var out [ksymBatch][ksymLen]byte
	if err := k.objs.KsymName.Get(&out); err != nil {
		return fmt.Errorf("get ksym_name: %w", err)
	}
	for i, w := range want {
		k.cache[w] = symbolName(out[i][:])
	}
	return nil
}

// symbolName turns %pB's "func+0xoff/0xsize [module]" into "func+0xoff";
// an address the kernel cannot name comes back as bare hex, and is "".
func symbolName(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	s := string(b)
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	if !strings.Contains(s, "+0x") || strings.HasPrefix(s, "0x") {
		return ""
	}
	return s
}

// close frees the program; names then names nothing new.
func (k *ksyms) close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if errors.Is(k.err, bpfload.ErrClosed) {
		return nil
	}
	k.err = bpfload.ErrClosed
	return k.objs.Close()
}
