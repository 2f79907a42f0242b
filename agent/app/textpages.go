package app

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropTextPages unmaps the pages of the agent's own binary it has mapped so
// far (code, read-only data), so that they count in its resident memory
// again only when it runs them again. The kernel maps a binary's pages 16
// at a time around each one touched; before the programs load, the pages
// the start mapped (flag parsing, the runtime's start, what Run did so
// far) would add to the load's peak. The pages stay in the page cache (a
// cgroup's charge for them is not less); one touched later comes back from
// there. Only mappings no page of which was ever written are dropped
// (smaps "Anonymous: 0"): a private mapping's written page (a relocation)
// would be lost. bench/agentcost BenchmarkAgentIdle: peak resident memory
// 27.3–27.6 → 24.2 MiB with the load's soft memory limit (tightGC). After
// the load it buys nothing: the running agent maps most of the binary
// again within a second.
func dropTextPages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return
	}
	defer f.Close()
	var drop []textSpan
	var cur *textSpan
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if rng, ok := mappingRange(fields[0]); ok && len(fields) >= 5 {
			cur = nil
			// Read-only (r-xp, r--p) mappings of the binary itself.
			if len(fields) >= 6 && fields[5] == exe && !strings.Contains(fields[1], "w") {
				drop = append(drop, rng)
				cur = &drop[len(drop)-1]
			}
			continue
		}
		if cur != nil && fields[0] == "Anonymous:" && fields[1] != "0" {
			drop = drop[:len(drop)-1] // written: keep it
			cur = nil
		}
	}
	if sc.Err() != nil {
		return
	}
	for _, s := range drop {
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_DONTNEED)
	}
}

// textSpan is one mapping's addresses.
type textSpan struct{ start, end uintptr }

// mappingRange parses the "start-end" of an smaps mapping line.
func mappingRange(s string) (r textSpan, ok bool) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		return r, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return r, false
	}
	return textSpan{uintptr(start), uintptr(end)}, true
}
