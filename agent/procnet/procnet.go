// Package procnet parses the kernel's SNMP-style counter files
// (/proc/net/snmp, /proc/net/netstat): pairs of lines, a header naming the
// fields and a line of values, both prefixed by the group ("Tcp:", "TcpExt:").
package procnet

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Counters maps "Group.Field" (e.g. "Tcp.OutRsts", "TcpExt.TCPAbortOnClose")
// to its value.
type Counters map[string]uint64

// Parse reads one file's content into c. Negative values (a few Tcp fields
// are signed, like MaxConn = -1) are skipped rather than wrapped.
func Parse(data []byte, c Counters) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var header []string
	var group string
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		g, rest, ok := strings.Cut(text, ":")
		if !ok {
			return fmt.Errorf("line %d: no group prefix in %q", line, text)
		}
		fields := strings.Fields(rest)
		if header == nil || g != group {
			header, group = fields, g
			continue
		}
		if len(fields) != len(header) {
			return fmt.Errorf("line %d: group %s has %d values for %d names", line, g, len(fields), len(header))
		}
		for i, name := range header {
			if v, err := strconv.ParseUint(fields[i], 10, 64); err == nil {
				c[g+"."+name] = v
			}
		}
		header = nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read counters: %w", err)
	}
	if header != nil {
		return fmt.Errorf("group %s has names but no values", group)
	}
	return nil
}
