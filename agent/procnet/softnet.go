package procnet

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// Softnet sums /proc/net/softnet_stat over CPUs. The file is host-wide
// (every namespace shares the CPUs' backlogs) and its columns are hex.
type Softnet struct {
	// Processed packets taken off the per-CPU backlog (column 1).
	Processed uint64
	// Dropped packets because the backlog was full, netdev_max_backlog
	// (column 2).
	Dropped uint64
	// TimeSqueeze counts NAPI rounds that ended with work left, out of
	// budget or time (column 3).
	TimeSqueeze uint64
	// FlowLimit counts packets dropped by the flow limit (column 11), 0 on
	// kernels that do not print it.
	FlowLimit uint64
	// CPUs is the number of lines.
	CPUs int
}

// ReadSoftnet reads a softnet_stat file (/proc/net/softnet_stat, or a
// test's copy).
func ReadSoftnet(path string) (Softnet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Softnet{}, err
	}
	return ParseSoftnet(data)
}

// ParseSoftnet reads softnet_stat's content.
func ParseSoftnet(data []byte) (Softnet, error) {
	var s Softnet
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return Softnet{}, fmt.Errorf("softnet_stat line %d: %d columns, want at least 3", line, len(f))
		}
		var v [11]uint64
		for i := 0; i < len(f) && i < len(v); i++ {
			n, err := strconv.ParseUint(f[i], 16, 32)
			if err != nil {
				return Softnet{}, fmt.Errorf("softnet_stat line %d column %d: %w", line, i+1, err)
			}
			v[i] = n
		}
		s.Processed += v[0]
		s.Dropped += v[1]
		s.TimeSqueeze += v[2]
		s.FlowLimit += v[10]
		s.CPUs++
	}
	if err := sc.Err(); err != nil {
		return Softnet{}, fmt.Errorf("read softnet_stat: %w", err)
	}
	if s.CPUs == 0 {
		return Softnet{}, fmt.Errorf("softnet_stat has no CPU lines")
	}
	return s, nil
}

// ParseSNMP6 reads /proc/net/snmp6, one "Name value" pair a line, into c
// under the same "Group.Field" keys as Parse: Udp6NoPorts becomes
// "Udp6.NoPorts", Ip6InDiscards "Ip6.InDiscards".
func ParseSNMP6(data []byte, c Counters) error { return parseSNMP6Into(data, c, nil) }

func parseSNMP6Into(data []byte, c Counters, k *keys) error {
	// Cut in place, as Parse does: a scanner's line and fields were an
	// allocation or two each of some ninety lines, every collection.
	line := 0
	for len(data) > 0 {
		var raw []byte
		raw, data, _ = bytes.Cut(data, []byte{'\n'})
		line++
		raw = bytes.TrimSuffix(raw, []byte{'\r'})
		name, value, ok := twoFields(raw)
		if !ok {
			if len(bytes.TrimSpace(raw)) == 0 {
				continue
			}
			return fmt.Errorf("snmp6 line %d: %q is not a name and a value", line, raw)
		}
		i := bytes.IndexByte(name, '6')
		if i <= 0 || i == len(name)-1 {
			return fmt.Errorf("snmp6 line %d: no group in %q", line, name)
		}
		if v, ok := parseUint(value); ok {
			c[k.keyBytes(name[:i+1], name[i+1:])] = v
		}
	}
	return nil
}

// twoFields splits a line of exactly two whitespace-separated fields.
func twoFields(b []byte) (first, second []byte, ok bool) {
	b = bytes.TrimSpace(b)
	i := bytes.IndexAny(b, " \t")
	if i < 0 {
		return nil, nil, false
	}
	first, second = b[:i], bytes.TrimSpace(b[i:])
	if len(second) == 0 || bytes.ContainsAny(second, " \t") {
		return nil, nil, false
	}
	return first, second, true
}

// parseUint is strconv.ParseUint(string(b), 10, 64) without the string.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		d := uint64(ch - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
