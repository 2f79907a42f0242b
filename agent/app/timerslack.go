package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procSelf is where raiseTimerSlack finds the process's threads.
const procSelf = "/proc/self"

// raiseTimerSlack raises the timer slack of every thread of the process
// (in procDir's task directory) to at least slack, never lowering one an
// operator set (systemd's TimerSlackNSec, prctl); threads made later take
// their maker's. It returns how many threads it raised.
//
// An idle agent's wakeups are mostly the Go runtime's sysmon thread: while
// a goroutine runs or is in a system call (a collection, an fsync of the
// spool) it sleeps 20 µs at a time, and the kernel's default slack of
// 50 µs lets each of those sleeps end alone, a context switch each. With
// a slack of a millisecond the kernel ends them with other timers' expiries
// instead: bench/agentcost BenchmarkAgentIdle, 12 rounds against the agent
// before it at load 0.2–14, 5–14 context switches a second against 11–26
// and less CPU in 8 of the 12 pairs (median ratio 0.87). What the
// slack delays is what sysmon does for a program with many busy goroutines
// (taking a P back from a system call, preempting one that ran 10 ms): the
// agent's work is a collection every interval, and its timers (the
// interval's ticker, the evidence rings' polls) are seconds apart. It does
// not touch the wakeups by the kernel for a socket's or a ring's data.
//
// Setting another thread's slack (/proc/TID/timerslack_ns) needs
// CAP_SYS_NICE: an agent without it keeps the kernel's.
func raiseTimerSlack(procDir string, slack time.Duration) (int, error) {
	tasks, err := os.ReadDir(filepath.Join(procDir, "task"))
	if err != nil {
		return 0, fmt.Errorf("list threads: %w", err)
	}
	// A thread's own file is at /proc/TID, not under task/ (the kernel
	// keeps timerslack_ns to the thread-group directories): TID's path
	// beside procDir.
	root := filepath.Dir(procDir)
	want := strconv.FormatInt(slack.Nanoseconds(), 10)
	raised := 0
	var errs []error
	for _, t := range tasks {
		file := filepath.Join(root, t.Name(), "timerslack_ns")
		raw, err := os.ReadFile(file)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) { // an exited thread
				errs = append(errs, fmt.Errorf("read thread %s's timer slack: %w", t.Name(), err))
			}
			continue
		}
		cur, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("thread %s's timer slack %q: %w", t.Name(), raw, err))
			continue
		}
		if cur >= slack.Nanoseconds() {
			continue
		}
		if err := os.WriteFile(file, []byte(want), 0); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("set thread %s's timer slack: %w", t.Name(), err))
			}
			continue
		}
		raised++
	}
	return raised, errors.Join(errs...)
}
