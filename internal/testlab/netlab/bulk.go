package netlab

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// Bulk copies n bytes over one TCP connection from A to B and returns once
// B has read them all, failing the test otherwise: a stream of full-sized
// (GSO) packets from A and their acknowledgements from B.
func (l *Lab) Bulk(t testing.TB, n int64) {
	t.Helper()
	var ln net.Listener
	if err := l.Do(l.B, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(l.IPB.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
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
	var c net.Conn
	if err := l.Do(l.A, func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(c, zeros{}, n); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("receive: timed out")
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }
