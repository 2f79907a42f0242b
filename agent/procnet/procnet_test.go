package procnet

import (
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    Counters
		wantErr string
	}{
		{
			name: "snmp tcp with signed field",
			in:   "Tcp: RtoAlgorithm MaxConn OutRsts\nTcp: 1 -1 42\n",
			want: Counters{"Tcp.RtoAlgorithm": 1, "Tcp.OutRsts": 42},
		},
		{
			name: "two groups",
			in:   "TcpExt: TCPAbortOnClose TCPAbortOnData\nTcpExt: 3 4\nIpExt: InOctets\nIpExt: 100\n",
			want: Counters{"TcpExt.TCPAbortOnClose": 3, "TcpExt.TCPAbortOnData": 4, "IpExt.InOctets": 100},
		},
		{name: "no final newline", in: "Tcp: A B\nTcp: 1 2", want: Counters{"Tcp.A": 1, "Tcp.B": 2}},
		{name: "carriage returns", in: "Tcp: A B\r\nTcp: 1 2\r\n", want: Counters{"Tcp.A": 1, "Tcp.B": 2}},
		{name: "empty line", in: "Tcp: A\n\nTcp: 1\n", wantErr: "line 2: no group prefix"},
		{name: "count mismatch", in: "Tcp: A B\nTcp: 1\n", wantErr: "1 values for 2 names"},
		{name: "no prefix", in: "garbage\n", wantErr: "no group prefix"},
		{name: "names without values", in: "Tcp: A B\n", wantErr: "no values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Counters{}
			err := Parse([]byte(c.in), got)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Parse error = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s = %d, want %d", k, got[k], v)
				}
			}
		})
	}
}

// The host's own files must parse: they are the fallback's only input.
func TestParseHostFiles(t *testing.T) {
	for _, f := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		c := Counters{}
		if err := Parse(data, c); err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		if len(c) < 10 {
			t.Errorf("%s: only %d counters", f, len(c))
		}
	}
}
