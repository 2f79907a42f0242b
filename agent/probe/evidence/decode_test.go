package evidence

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestAddrPort(t *testing.T) {
	v4 := [16]byte{198, 18, 0, 2}
	mapped := [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 1}
	v6 := [16]byte{0x20, 0x01, 0x00, 0x02, 15: 1}
	cases := []struct {
		family uint16
		b      [16]byte
		want   string
	}{
		{unix.AF_INET, v4, "198.18.0.2:9"},
		{unix.AF_INET6, mapped, "198.18.0.1:9"},
		{unix.AF_INET6, v6, "[2001:2::1]:9"},
		{0, v4, "invalid AddrPort"},
	}
	for _, c := range cases {
		if got := AddrPort(c.family, c.b, 9); got.String() != c.want {
			t.Errorf("AddrPort(%d, %v) = %s, want %s", c.family, c.b, got, c.want)
		}
	}
	if AddrPort(0, v4, 9) != (netip.AddrPort{}) {
		t.Error("an unknown family must give the zero AddrPort")
	}
}

// A kernel stamp taken now reads as now on the wall clock.
func TestClock(t *testing.T) {
	if got := ClockWithOffset(time.Second).Time(5_000_000_000); got.UnixNano() != 6_000_000_000 {
		t.Errorf("offset 1s + stamp 5s = %d ns, want 6e9", got.UnixNano())
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(NewClock().Time(uint64(ts.Nano()))); d < 0 || d > time.Second {
		t.Errorf("a monotonic stamp of now reads %s away from now", d)
	}
}

func TestDecode(t *testing.T) {
	type record struct {
		TsNs  uint64
		Netns uint32
		Port  uint16
		_     [2]byte
	}
	raw := []byte{1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0x50, 0, 0xff, 0xff}
	r, err := Decode[record](raw)
	if err != nil || r.TsNs != 1 || r.Netns != 7 || r.Port != 0x50 {
		t.Fatalf("Decode = %+v, %v", r, err)
	}
	if _, err := Decode[record](raw[:15]); err == nil || !strings.HasPrefix(err.Error(), "decode 15 bytes: ") {
		t.Fatalf("Decode of a short record: %v, want an error saying decode 15 bytes", err)
	}
}
