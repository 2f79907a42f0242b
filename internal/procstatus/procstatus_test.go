package procstatus

import (
	"os"
	"runtime"
	"testing"
)

// Our own peak resident set holds a buffer we touched, and is at least the
// current one.
func TestKiB(t *testing.T) {
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = 1
	}
	// The current set first: the peak read after it is at least as large.
	rss, err := KiB(os.Getpid(), "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := KiB(os.Getpid(), "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(buf)
	if hwm < 32<<10 || hwm < rss {
		t.Errorf("VmHWM %d KiB, VmRSS %d KiB: want VmHWM at least 32768 and at least VmRSS", hwm, rss)
	}
	if _, err := KiB(os.Getpid(), "NoSuchField"); err == nil {
		t.Error("a missing field read without error")
	}
}
