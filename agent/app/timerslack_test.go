package app

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRaiseTimerSlack: every thread below the slack is raised to it, none
// above it is lowered, and threads that exited meanwhile are no error.
func TestRaiseTimerSlack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before map[string]string // thread: timerslack_ns ("" for a thread gone before it is read)
		slack  time.Duration
		after  map[string]string
		raised int
		err    bool
	}{
		{name: "kernel default raised", before: map[string]string{"10": "50000\n", "11": "50000\n"}, slack: time.Millisecond,
			after: map[string]string{"10": "1000000", "11": "1000000"}, raised: 2},
		{name: "an operator's larger slack kept", before: map[string]string{"10": "50000\n", "11": "5000000\n"}, slack: time.Millisecond,
			after: map[string]string{"10": "1000000", "11": "5000000\n"}, raised: 1},
		{name: "equal left alone", before: map[string]string{"10": "1000000\n"}, slack: time.Millisecond,
			after: map[string]string{"10": "1000000\n"}, raised: 0},
		{name: "an exited thread skipped", before: map[string]string{"10": "50000\n", "11": ""}, slack: time.Millisecond,
			after: map[string]string{"10": "1000000"}, raised: 1},
		{name: "unreadable value an error, the others raised", before: map[string]string{"10": "x\n", "11": "50000\n"}, slack: time.Millisecond,
			after: map[string]string{"10": "x\n", "11": "1000000"}, raised: 1, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			self := filepath.Join(root, "self")
			for tid, v := range tc.before {
				if err := os.MkdirAll(filepath.Join(self, "task", tid), 0o755); err != nil {
					t.Fatal(err)
				}
				if v == "" {
					continue
				}
				if err := os.MkdirAll(filepath.Join(root, tid), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, tid, "timerslack_ns"), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n, err := raiseTimerSlack(self, tc.slack)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if n != tc.raised {
				t.Errorf("raised %d threads, want %d", n, tc.raised)
			}
			for tid, want := range tc.after {
				got, err := os.ReadFile(filepath.Join(root, tid, "timerslack_ns"))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != want {
					t.Errorf("thread %s: timerslack_ns %q, want %q", tid, got, want)
				}
			}
		})
	}
}

// TestRaiseTimerSlackKernel raises this process's threads' slack through
// the kernel's files and reads it back on one thread with prctl, then puts
// every thread's back.
func TestRaiseTimerSlackKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting another thread's timer slack needs CAP_SYS_NICE")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := map[string]string{}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if v, err := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns"); err == nil {
			before[task.Name()] = strings.TrimSpace(string(v))
		}
	}
	t.Cleanup(func() {
		for tid, v := range before {
			_ = os.WriteFile("/proc/"+tid+"/timerslack_ns", []byte(v), 0)
		}
	})
	own, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	slack := time.Duration(own) + 7*time.Microsecond
	n, err := raiseTimerSlack(procSelf, slack)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no thread raised")
	}
	got, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(got) != slack {
		t.Errorf("this thread's slack %d ns, want %d (was %s)", got, slack.Nanoseconds(), strconv.Itoa(own))
	}
}
