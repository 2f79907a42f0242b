package procnet

import (
	"bufio"
	"bytes"
	"fmt"
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
func ParseSNMP6(data []byte, c Counters) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return fmt.Errorf("snmp6 line %d: %q is not a name and a value", line, sc.Text())
		}
		i := strings.IndexByte(f[0], '6')
		if i <= 0 || i == len(f[0])-1 {
			return fmt.Errorf("snmp6 line %d: no group in %q", line, f[0])
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			c[f[0][:i+1]+"."+f[0][i+1:]] = v
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read snmp6: %w", err)
	}
	return nil
}
