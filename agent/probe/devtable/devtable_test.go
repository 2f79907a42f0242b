package devtable

import "testing"

func TestName(t *testing.T) {
	for _, tc := range []struct {
		recorded string
		ifindex  uint32
		want     string
	}{
		{"eth0", 2, "eth0"},
		{"", 7, "if7"}, // a program that met the device before it had a name
	} {
		if got := Name(tc.recorded, tc.ifindex); got != tc.want {
			t.Errorf("Name(%q, %d) = %q, want %q", tc.recorded, tc.ifindex, got, tc.want)
		}
	}
}
