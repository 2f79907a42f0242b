// Package procstatus reads another process's memory figures from
// /proc/<pid>/status, for the tests and benchmarks that measure a real
// binary (the agent's peak memory, the collector's per node).
package procstatus

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// KiB returns a "kB" field of /proc/<pid>/status: "VmHWM" is the peak
// resident set, "VmRSS" the current one.
func KiB(pid int, field string) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, fmt.Errorf("%s %q in /proc/%d/status: %w", field, v, pid, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read /proc/%d/status: %w", pid, err)
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
