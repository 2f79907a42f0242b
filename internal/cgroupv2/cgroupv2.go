// Package cgroupv2 finds the cgroup v2 hierarchy, where the agent attaches
// its cgroup programs (sockops).
package cgroupv2

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Root is the root of the cgroup v2 hierarchy as this process
// sees it (its cgroup namespace): attaching there covers every process of
// the node, or of the container when the agent runs in one with a private
// cgroup namespace.
func Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find cgroup v2 mount: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) >= 5 && len(qf) >= 1 && qf[0] == "cgroup2" && pf[3] == "/" {
			return unescapeMount(pf[4]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("find cgroup v2 mount: %w", err)
	}
	return "", errors.New("no cgroup v2 (cgroup2) file system is mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
