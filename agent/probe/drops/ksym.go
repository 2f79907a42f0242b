package drops

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// ksyms names the kernel code that dropped a packet (the tracepoint's
// location, a return address) as "function+0xoff", from /proc/kallsyms.
//
// Drop sites are few, so names are cached per address, and each batch of
// new addresses costs one scan of kallsyms (about 120k lines, tens of
// milliseconds). Nothing is held but the cache: keeping the whole symbol
// table would cost the agent megabytes.
type ksyms struct {
	path string

	mu       sync.Mutex
	cache    map[uint64]string // "" = looked up, not found
	disabled bool              // addresses hidden (kptr_restrict) or the file unreadable
}

func newKsyms() *ksyms {
	return &ksyms{path: "/proc/kallsyms", cache: map[uint64]string{}}
}

// names returns "func+0xoff" for each address it can name, scanning
// kallsyms once for all the addresses not seen before.
func (k *ksyms) names(addrs []uint64) map[uint64]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var missed []uint64
	for _, a := range addrs {
		if _, ok := k.cache[a]; !ok && a != 0 {
			missed = append(missed, a)
		}
	}
	if len(missed) > 0 && !k.disabled {
		if err := k.scan(missed); err != nil {
			k.disabled = true
		}
	}
	out := make(map[uint64]string, len(addrs))
	for _, a := range addrs {
		if s := k.cache[a]; s != "" {
			out[a] = s
		}
	}
	return out
}

// scan resolves addresses to the nearest text symbol at or below each.
// kallsyms is not fully sorted (modules follow the core kernel), so every
// line is considered.
//
// It streams the file and copies a candidate's name into that address's
// own buffer: reading kallsyms whole (5 MB, grown by doubling because /proc
// reports no size) and keeping a string per candidate line made a scan
// allocate ~45 MB and was the agent's peak resident memory.
func (k *ksyms) scan(want []uint64) error {
	f, err := os.Open(k.path)
	if err != nil {
		return err
	}
	defer f.Close()
	type best struct {
		addr uint64
		name []byte
	}
	found := make([]best, len(want))
	sc := bufio.NewScanner(f)
	nonzero := false
	for sc.Scan() {
		line := sc.Bytes()
		// "ffffffff81000000 T _stext\t[module]"
		sp := bytes.IndexByte(line, ' ')
		if sp != 16 || len(line) < sp+4 {
			continue
		}
		if t := line[sp+1]; t != 't' && t != 'T' {
			continue
		}
		a, err := strconv.ParseUint(string(line[:sp]), 16, 64)
		if err != nil || a == 0 {
			continue
		}
		nonzero = true
		for i, w := range want {
			if a <= w && a >= found[i].addr {
				name := line[sp+3:]
				if j := bytes.IndexByte(name, '\t'); j >= 0 {
					name = name[:j]
				}
				found[i] = best{a, append(found[i].name[:0], name...)}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", k.path, err)
	}
	if !nonzero {
		return fmt.Errorf("%s shows no addresses (kptr_restrict)", k.path)
	}
	for i, w := range want {
		k.cache[w] = ""
		// A function is far smaller than 1 MiB: beyond that the nearest
		// symbol is not this code's.
		if b := found[i]; len(b.name) > 0 && w-b.addr < 1<<20 {
			k.cache[w] = fmt.Sprintf("%s+0x%x", b.name, w-b.addr)
		}
	}
	return nil
}
