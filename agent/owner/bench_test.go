package owner

import (
	"os"
	"testing"
	"time"
)

// BenchmarkScan measures one scan of /proc naming one namespace (the
// host's), beside its anchor, a bare listing of /proc, on the same machine
// in the same run. It reports the processes seen.
func BenchmarkScan(b *testing.B) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Skip(err)
	}
	procs := 0
	for _, e := range ents {
		if e.Name()[0] >= '0' && e.Name()[0] <= '9' {
			procs++
		}
	}
	ino, ok := nsInode("/proc/thread-self/ns/net")
	if !ok {
		b.Skip("no /proc/thread-self/ns/net")
	}
	b.Run("list-proc", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.ReadDir("/proc"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(procs), "procs")
	})
	b.Run("scan", func(b *testing.B) {
		r := New(Options{MinScanGap: time.Nanosecond, RefreshEvery: time.Nanosecond, RescanEvery: time.Nanosecond})
		for b.Loop() {
			r.Lookup(ino)
		}
		b.ReportMetric(float64(procs), "procs")
	})
}
