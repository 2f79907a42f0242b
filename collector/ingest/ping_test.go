package ingest

import (
	"strings"
	"testing"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func TestHelloPingAddress(t *testing.T) {
	cases := []struct {
		in, want, err string
	}{
		{"", "", ""},
		{"198.18.0.1", "198.18.0.1", ""},
		{"2001:db8::1", "2001:db8::1", ""},
		{"::ffff:10.0.0.1", "10.0.0.1", ""},
		{"web-1.example.com", "", "not an IP address"},
		{"10.0.0.1:7701", "", "not an IP address"},
		{"fe80::1%eth0", "", "scoped"},
		{"0.0.0.0", "", "unicast"},
		{"127.0.0.1", "", "non-loopback"},
		{"ff02::1", "", "unicast"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			h := &nbsv1.Hello{NodeName: "n1", InstanceId: 1, IntervalMs: 1000, PingAddress: c.in}
			n, _, rej := DefaultLimits().checkHello(h)
			if c.err != "" {
				if rej == nil || !strings.Contains(rej.msg, c.err) || !strings.Contains(rej.msg, "ping_address") {
					t.Fatalf("checkHello(ping_address %q) = %v, want a rejection naming ping_address and %q", c.in, rej, c.err)
				}
				return
			}
			if rej != nil || n.PingAddress != c.want {
				t.Fatalf("checkHello(ping_address %q) = %q, %v; want %q", c.in, n.PingAddress, rej, c.want)
			}
		})
	}
}
