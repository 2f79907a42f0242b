// Package procnet parses the kernel's SNMP-style counter files
// (/proc/net/snmp, /proc/net/netstat): pairs of lines, a header naming the
// fields and a line of values, both prefixed by the group ("Tcp:", "TcpExt:").
package procnet

import (
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
func Parse(data []byte, c Counters) error { return parseInto(data, c, nil) }

// keys interns the counters' names ("Tcp.OutRsts"): a file's names are the
// same from read to read, and making each again was most of what reading
// the agent's counters allocated every collection (hundreds of names).
type keys struct {
	m   map[string]string
	buf []byte
}

// maxKeys bounds the names interned; a kernel has a few hundred.
const maxKeys = 4096

// key returns group+"."+name, interned when k is not nil.
func (k *keys) key(group, name string) string {
	if k == nil {
		return group + "." + name
	}
	k.buf = append(append(append(k.buf[:0], group...), '.'), name...)
	return k.intern()
}

// keyBytes is key of bytes.
func (k *keys) keyBytes(group, name []byte) string {
	if k == nil {
		return string(group) + "." + string(name)
	}
	k.buf = append(append(append(k.buf[:0], group...), '.'), name...)
	return k.intern()
}

// intern returns k.buf as an interned string.
func (k *keys) intern() string {
	if s, ok := k.m[string(k.buf)]; ok {
		return s
	}
	s := string(k.buf)
	if k.m == nil {
		k.m = map[string]string{}
	}
	if len(k.m) < maxKeys {
		k.m[s] = s
	}
	return s
}

func parseInto(data []byte, c Counters, k *keys) error {
	var header []string
	var group string
	line := 0
	// The content is in memory already: its lines are cut from it as
	// bufio.ScanLines would (a final line without a newline counts, a
	// trailing \r goes), without a scanner's 64 KiB buffer per file, which
	// was most of the garbage of reading a namespace's counters.
	for len(data) > 0 {
		var raw []byte
		raw, data, _ = bytes.Cut(data, []byte{'\n'})
		line++
		text := string(bytes.TrimSuffix(raw, []byte{'\r'}))
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
				c[k.key(g, name)] = v
			}
		}
		header = nil
	}
	if header != nil {
		return fmt.Errorf("group %s has names but no values", group)
	}
	return nil
}
