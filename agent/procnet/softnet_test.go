package procnet

import (
	"os"
	"testing"
)

func TestParseSoftnet(t *testing.T) {
	// Two CPUs of a 6.x kernel: 13 columns.
	data := []byte("0000a000 00000002 0000000f 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000003 00000000 00000000\n" +
		"00000010 00000001 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001\n")
	s, err := ParseSoftnet(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Softnet{Processed: 0xa010, Dropped: 3, TimeSqueeze: 16, FlowLimit: 3, CPUs: 2}); s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	// An old kernel's 3 columns.
	if s, err := ParseSoftnet([]byte("00000001 00000002 00000003\n")); err != nil || s.Dropped != 2 || s.FlowLimit != 0 {
		t.Errorf("3 columns: %+v, %v", s, err)
	}
	for _, bad := range []string{"", "0001 0002\n", "zz 00 00\n"} {
		if _, err := ParseSoftnet([]byte(bad)); err == nil {
			t.Errorf("ParseSoftnet(%q): no error", bad)
		}
	}
	// This machine's file parses and has a line per CPU.
	if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		if s, err := ParseSoftnet(b); err != nil || s.CPUs == 0 {
			t.Errorf("this machine's softnet_stat: %+v, %v", s, err)
		}
	}
}

func TestParseSNMP6(t *testing.T) {
	c := Counters{}
	data := []byte("Ip6InReceives                   \t12\nUdp6NoPorts                     \t3\nUdpLite6InErrors \t0\nIcmp6OutType133 5\n")
	if err := ParseSNMP6(data, c); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]uint64{"Ip6.InReceives": 12, "Udp6.NoPorts": 3, "UdpLite6.InErrors": 0, "Icmp6.OutType133": 5} {
		if v, ok := c[k]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", k, v, ok, want)
		}
	}
	for _, bad := range []string{"Ip6InReceives\n", "NoGroup 1\n", "Ip6 1\n"} {
		if err := ParseSNMP6([]byte(bad), Counters{}); err == nil {
			t.Errorf("ParseSNMP6(%q): no error", bad)
		}
	}
	if b, err := os.ReadFile("/proc/net/snmp6"); err == nil {
		c := Counters{}
		if err := ParseSNMP6(b, c); err != nil {
			t.Errorf("this machine's snmp6: %v", err)
		} else if _, ok := c["Udp6.NoPorts"]; !ok {
			t.Errorf("this machine's snmp6 has no Udp6NoPorts: %v", c)
		}
	}
}
