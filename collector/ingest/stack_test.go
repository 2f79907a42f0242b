//go:build !race

// The race detector's instrumentation makes every frame larger: the stack
// an idle stream keeps is a property of the collector as built, without it.

package ingest

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A connected node's handler goroutine waits in Recv for the whole life of
// its stream. Registering the node grows its stack; once the stream is
// idle, collections must shrink it back to 8 KiB: 8 KiB a node more if they
// do not. With deferred calls in Connect, the frame that waits, it stayed
// at 16 KiB (Connect). The figure includes the test client's goroutine per
// stream (about 2.7 KiB).
func TestIdleStreamStack(t *testing.T) {
	const streams = 200
	limits := DefaultLimits()
	limits.MaxStreamsPerIP = 2 * streams
	_, _, c := startServerWith(t, ServerOptions{Auth: credentialAuth{}, Limits: limits})
	warm, m, err := open(t, c, "stack-warm", cred("cred-stack-warm"), 1, nil)
	if err != nil || m.GetConfig() == nil {
		t.Fatalf("first answer: %v, %v", m, err)
	}
	defer warm.cancel()
	settle := func() uint64 {
		time.Sleep(200 * time.Millisecond)
		var ms runtime.MemStats
		for range 3 {
			runtime.GC() // a collection shrinks the stacks it scans
		}
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	before, g0 := settle(), runtime.NumGoroutine()
	var opened []*agentStream
	for i := range streams {
		name := fmt.Sprintf("stack-%03d", i)
		s, m, err := open(t, c, name, cred("cred-"+name), 1, nil)
		if err != nil || m.GetConfig() == nil {
			t.Fatalf("stream %d: %v, %v", i, m, err)
		}
		opened = append(opened, s)
	}
	perStream := float64(settle()-before) / streams / 1024
	t.Logf("%d idle streams: %.1f KiB of stack each, %d goroutines more", streams, perStream, runtime.NumGoroutine()-g0)
	if perStream > 12 { // 18.6 KiB with Connect's defers
		t.Errorf("an idle stream holds %.1f KiB of stack, want its handler's 8 KiB", perStream)
	}
	for _, s := range opened {
		s.cancel()
	}
}
