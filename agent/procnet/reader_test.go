package procnet

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
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
