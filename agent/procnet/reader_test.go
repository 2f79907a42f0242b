package procnet

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"strings"
	"testing"
)

// fakeFiles serves file contents by path and counts the reads.
type fakeFiles struct {
	files map[string]string
	errs  map[string]error
	reads map[string]int
}

func (f *fakeFiles) read(path string) ([]byte, error) {
	f.reads[path]++
	if err := f.errs[path]; err != nil {
		// As netns.Handle.ReadFile wraps it.
		return nil, fmt.Errorf("read %s in netns x: %w", path, err)
	}
	return []byte(f.files[path]), nil
}

func TestReader(t *testing.T) {
	files := map[string]string{
		SNMPPath:    "Tcp: OutRsts EstabResets\nTcp: 7 3\n",
		NetstatPath: "TcpExt: TCPTimeouts\nTcpExt: 11\n",
		SNMP6Path:   "Udp6NoPorts 5\n",
	}
	errBroken := errors.New("broken")
	type step struct {
		next      bool // call Next first
		snmp6     bool // SNMP6 instead of SNMP
		want      Counters
		wantErr   string
		wantReads int // reads of the file(s) so far
	}
	cases := []struct {
		name  string
		files map[string]string
		errs  map[string]error
		steps []step
	}{
		{name: "no cycle reads every time", files: files, steps: []step{
			{want: Counters{"Tcp.OutRsts": 7, "Tcp.EstabResets": 3, "TcpExt.TCPTimeouts": 11}, wantReads: 1},
			{want: Counters{"Tcp.OutRsts": 7, "Tcp.EstabResets": 3, "TcpExt.TCPTimeouts": 11}, wantReads: 2},
			{snmp6: true, want: Counters{"Udp6.NoPorts": 5}, wantReads: 1},
			{snmp6: true, want: Counters{"Udp6.NoPorts": 5}, wantReads: 2},
		}},
		{name: "once per cycle", files: files, steps: []step{
			{next: true, want: Counters{"Tcp.OutRsts": 7, "Tcp.EstabResets": 3, "TcpExt.TCPTimeouts": 11}, wantReads: 1},
			{want: Counters{"Tcp.OutRsts": 7, "Tcp.EstabResets": 3, "TcpExt.TCPTimeouts": 11}, wantReads: 1},
			{snmp6: true, want: Counters{"Udp6.NoPorts": 5}, wantReads: 1},
			{snmp6: true, want: Counters{"Udp6.NoPorts": 5}, wantReads: 1},
			{next: true, want: Counters{"Tcp.OutRsts": 7, "Tcp.EstabResets": 3, "TcpExt.TCPTimeouts": 11}, wantReads: 2},
			{snmp6: true, want: Counters{"Udp6.NoPorts": 5}, wantReads: 2},
		}},
		{name: "IPv6 off", files: files, errs: map[string]error{SNMP6Path: fs.ErrNotExist}, steps: []step{
			{next: true, snmp6: true, want: Counters{}, wantReads: 1},
			{snmp6: true, want: Counters{}, wantReads: 1},
		}},
		{name: "a failed read fails the cycle, the next cycle reads again", files: files,
			errs: map[string]error{NetstatPath: errBroken}, steps: []step{
				{next: true, wantErr: "broken", wantReads: 1},
				{wantErr: "broken", wantReads: 1},
				{next: true, wantErr: "broken", wantReads: 2},
			}},
		{name: "snmp6 unreadable", files: files, errs: map[string]error{SNMP6Path: fs.ErrPermission}, steps: []step{
			{next: true, snmp6: true, wantErr: "permission denied", wantReads: 1},
		}},
		{name: "parse error names the file", files: map[string]string{SNMPPath: "garbage\n", NetstatPath: files[NetstatPath]},
			steps: []step{{next: true, wantErr: "parse " + SNMPPath, wantReads: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeFiles{files: c.files, errs: c.errs, reads: map[string]int{}}
			r := NewReader(f.read)
			for i, s := range c.steps {
				if s.next {
					r.Next()
				}
				get, path := r.SNMP, SNMPPath
				if s.snmp6 {
					get, path = r.SNMP6, SNMP6Path
				}
				got, err := get()
				if f.reads[path] != s.wantReads {
					t.Errorf("step %d: %s read %d times, want %d", i, path, f.reads[path], s.wantReads)
				}
				if !s.snmp6 && f.reads[NetstatPath] > f.reads[SNMPPath] {
					t.Errorf("step %d: netstat read %d times, snmp %d", i, f.reads[NetstatPath], f.reads[SNMPPath])
				}
				if s.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), s.wantErr) {
						t.Errorf("step %d: error %v, want %q", i, err, s.wantErr)
					}
					continue
				}
				if err != nil || !maps.Equal(got, s.want) {
					t.Errorf("step %d: %v, %v; want %v", i, got, err, s.want)
				}
			}
		})
	}
}

// A cycle's counters are this machine's files parsed as Parse and
// ParseSNMP6 parse them, and their names are made once: a cycle after the
// first allocates a few objects a file, not one a counter.
func TestReaderNamesOnce(t *testing.T) {
	files := map[string][]byte{}
	for _, p := range []string{SNMPPath, NetstatPath, SNMP6Path} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Skipf("no %s: %v", p, err)
		}
		files[p] = b
	}
	r := NewReader(func(p string) ([]byte, error) { return files[p], nil })
	want, want6 := Counters{}, Counters{}
	for _, p := range []string{SNMPPath, NetstatPath} {
		if err := Parse(files[p], want); err != nil {
			t.Fatal(err)
		}
	}
	if err := ParseSNMP6(files[SNMP6Path], want6); err != nil {
		t.Fatal(err)
	}
	cycle := func() {
		r.Next()
		c, err := r.SNMP()
		if err != nil || !maps.Equal(c, want) {
			t.Fatalf("SNMP = %d counters, %v; want Parse's %d", len(c), err, len(want))
		}
		c6, err := r.SNMP6()
		if err != nil || !maps.Equal(c6, want6) {
			t.Fatalf("SNMP6 = %d counters, %v; want ParseSNMP6's %d", len(c6), err, len(want6))
		}
	}
	cycle()
	n := len(want) + len(want6)
	allocs := testing.AllocsPerRun(5, cycle)
	t.Logf("%.0f allocations a cycle for %d counters", allocs, n)
	if allocs > float64(n)/4 {
		t.Errorf("%.0f allocations a cycle for %d counters", allocs, n)
	}
}

// ParseSNMP6's edge cases, with the names interned and not.
func TestParseSNMP6Cases(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Counters
		wantErr  string
	}{
		{"counters", "Ip6InReceives  \t 12\nUdp6NoPorts 5\r\n\nIcmp6OutMsgs 0", Counters{"Ip6.InReceives": 12, "Udp6.NoPorts": 5, "Icmp6.OutMsgs": 0}, ""},
		{"negative or too large skipped", "Udp6X -1\nUdp6Y 18446744073709551616\nUdp6Z 7\n", Counters{"Udp6.Z": 7}, ""},
		{"three fields", "Udp6NoPorts 5 6\n", nil, "line 1"},
		{"one field", "Udp6NoPorts\n", nil, "line 1"},
		{"no group", "NoPorts 5\n", nil, "no group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []*keys{nil, {}} {
				got := Counters{}
				err := parseSNMP6Into([]byte(tc.in), got, k)
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
					}
					continue
				}
				if err != nil || !maps.Equal(got, tc.want) {
					t.Fatalf("got %v, %v; want %v", got, err, tc.want)
				}
			}
		})
	}
}
