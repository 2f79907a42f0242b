package connlimit

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
)

// countingPool is a mem.BufferPool that knows how many of its buffers are
// out.
type countingPool struct{ out atomic.Int64 }

func (p *countingPool) Get(n int) *[]byte {
	p.out.Add(1)
	b := make([]byte, n)
	return &b
}

func (p *countingPool) Put(*[]byte) { p.out.Add(-1) }

var _ mem.BufferPool = (*countingPool)(nil)

// acceptOne is a listener of the package's and one connection accepted by
// it, with the client's end.
func acceptOne(t *testing.T) (server *conn, client net.Conn) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, Limits{Max: 4, PerAddress: 4}, NewMetrics("test"))
	t.Cleanup(func() { l.Close() })
	client, err = net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc.(*conn), client
}

// A connection waiting for bytes holds none of the pool's buffers; what
// arrives is read into one, and the peer's close is io.EOF.
func TestReadOnReady(t *testing.T) {
	c, client := acceptOne(t)
	pool := &countingPool{}
	type result struct {
		b   []byte
		err error
	}
	read := func() chan result {
		ch := make(chan result, 1)
		go func() {
			buf, n, err := c.ReadOnReady(64, pool)
			var b []byte
			if buf != nil {
				b = append(b, (*buf)[:n]...)
				pool.Put(buf)
			}
			ch <- result{b, err}
		}()
		return ch
	}
	got := read()
	time.Sleep(50 * time.Millisecond) // the read is waiting for bytes
	if n := pool.out.Load(); n != 0 {
		t.Errorf("a read waiting for bytes holds %d buffers, want 0", n)
	}
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || string(r.b) != "hello" {
		t.Fatalf("read %q, %v; want \"hello\"", r.b, r.err)
	}
	client.Close()
	if r := <-read(); !errors.Is(r.err, io.EOF) || len(r.b) != 0 {
		t.Errorf("after the peer's close: %q, %v; want io.EOF", r.b, r.err)
	}
	if n := pool.out.Load(); n != 0 {
		t.Errorf("%d buffers not returned to the pool", n)
	}
}

// A gRPC server on the listener holds no more memory a connection than
// one on the bare TCP listener: gRPC gives a connection it does not
// recognise a 32 KiB read buffer for its whole life unless it can read it
// when ready (ReadOnReady).
func TestGRPCIdleConnectionHoldsNoReadBuffer(t *testing.T) {
	const conns = 200
	heldPerConn := func(limited bool) float64 {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var lis net.Listener = inner
		if limited {
			lis = New(inner, Limits{Max: 2 * conns, PerAddress: 2 * conns}, NewMetrics("test"))
		}
		srv := grpc.NewServer()
		go srv.Serve(lis)
		defer srv.Stop()
		before := heapInUse()
		var clients []*grpc.ClientConn
		defer func() {
			for _, cc := range clients {
				cc.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for range conns {
			cc, err := grpc.NewClient("passthrough:///"+inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, cc)
			cc.Connect()
			for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
				if !cc.WaitForStateChange(ctx, s) {
					t.Fatalf("a client did not connect: %v", s)
				}
			}
		}
		// A client is ready once it has the server's settings, which the
		// server's transport (and its read buffer, if any) sends once made.
		return float64(heapInUse()-before) / conns
	}
	bare, limited := heldPerConn(false), heldPerConn(true)
	t.Logf("heap a connection (client and server): bare listener %.0f B, limited %.0f B", bare, limited)
	if limited-bare > 8<<10 {
		t.Errorf("a gRPC connection through the listener holds %.0f B more heap than one on the bare listener, want at most 8 KiB", limited-bare)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
