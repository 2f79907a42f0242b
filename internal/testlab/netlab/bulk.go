package netlab

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// Bulk copies n bytes over one TCP connection from A to B and returns once
// B has read them all, failing the test otherwise: a stream of full-sized
// (GSO) packets from A and their acknowledgements from B.
func (l *Lab) Bulk(t testing.TB, n int64) {
	t.Helper()
	addr, wait := l.Sink(t, netip.AddrPortFrom(l.IPB, 0), n)
	var c net.Conn
	if err := l.Do(l.A, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(c, zeros{}, n); err != nil {
		t.Fatal(err)
	}
	c.Close()
	wait()
}

// Sink listens in B at dst (port 0: any free one) for one TCP connection
// and reads it to its end. It returns the address to connect to, and wait,
// which returns once the sender has closed, failing the test unless
// exactly n bytes came within 30 s.
func (l *Lab) Sink(t testing.TB, dst netip.AddrPort, n int64) (addr string, wait func()) {
	t.Helper()
	var ln net.Listener
	if err := l.Do(l.B, func() (err error) {
		ln, err = net.Listen("tcp", dst.String())
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", l.B, err)
	}
	t.Cleanup(func() { ln.Close() }) // a sender that never came
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		m, err := io.Copy(io.Discard, c)
		if err == nil && m != n {
			err = fmt.Errorf("received %d bytes of %d", m, n)
		}
		got <- err
	}()
	return ln.Addr().String(), func() {
		t.Helper()
		defer ln.Close()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("receive at %s: %v", ln.Addr(), err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("receive at %s: not done after 30s", ln.Addr())
		}
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }
