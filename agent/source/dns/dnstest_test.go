package dns

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/netns"
)

// The lab's DNS server: a UDP server of the test's own, whose answers are
// told by the query's first label, so a test says what it wants in the
// name it asks for:
//
//	ok-<ms>-<n>     NOERROR after <ms> milliseconds
//	nx-<n>          NXDOMAIN
//	fail-<n>        SERVFAIL
//	refused-<n>     REFUSED
//	drop-<n>        no answer at all
//
// It counts what it received and what it sent by response code: with the
// client's own counts and timings, the oracle the agent's counts are held
// against.
type dnsServer struct {
	conn *net.UDPConn
	Addr netip.AddrPort

	mu       sync.Mutex
	received int
	sent     map[int]int // by rcode
	wg       sync.WaitGroup
}

const (
	rcodeNoError  = 0
	rcodeServFail = 2
	rcodeNXDomain = 3
	rcodeRefused  = 5
)

// serveDNS starts a server on addr (port 53) inside h, stopped with the test.
func serveDNS(t *testing.T, h netns.Handle, addr netip.Addr) *dnsServer {
	t.Helper()
	s := &dnsServer{sent: map[int]int{}}
	err := h.Do(func() (err error) {
		s.conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 53)))
		return err
	})
	if err != nil {
		t.Fatalf("dns server in %s: %v", h, err)
	}
	s.Addr = s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		s.conn.Close()
		s.wg.Wait()
	})
	return s
}

func (s *dnsServer) serve() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed
		}
		q := append([]byte(nil), buf[:n]...)
		name, qend, ok := parseQuestion(q)
		if !ok {
			continue
		}
		s.mu.Lock()
		s.received++
		s.mu.Unlock()
		label, _, _ := strings.Cut(name, ".")
		rcode, delay := rcodeNoError, time.Duration(0)
		switch kind, rest, _ := strings.Cut(label, "-"); kind {
		case "drop":
			continue
		case "nx":
			rcode = rcodeNXDomain
		case "fail":
			rcode = rcodeServFail
		case "refused":
			rcode = rcodeRefused
		case "ok":
			ms, _, _ := strings.Cut(rest, "-")
			v, _ := strconv.Atoi(ms)
			delay = time.Duration(v) * time.Millisecond
		}
		s.wg.Add(1)
		go func() { // a slow answer must not hold up the others
			defer s.wg.Done()
			time.Sleep(delay)
			resp := make([]byte, 0, qend)
			resp = binary.BigEndian.AppendUint16(resp, binary.BigEndian.Uint16(q[0:2]))
			resp = binary.BigEndian.AppendUint16(resp, 0x8180|uint16(rcode)) // QR, RD, RA
			resp = append(resp, 0, 1, 0, 0, 0, 0, 0, 0)                      // one question, nothing else
			resp = append(resp, q[12:qend]...)
			if _, err := s.conn.WriteToUDPAddrPort(resp, from); err == nil {
				s.mu.Lock()
				s.sent[rcode]++
				s.mu.Unlock()
			}
		}()
	}
}

// counts returns what the server received and sent, by rcode.
func (s *dnsServer) counts() (received int, sent map[int]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent = map[int]int{}
	for k, v := range s.sent {
		sent[k] = v
	}
	return s.received, sent
}

// parseQuestion returns the dotted name of a message's one question and
// where the question ends.
func parseQuestion(m []byte) (name string, end int, ok bool) {
	if len(m) < 12 {
		return "", 0, false
	}
	var labels []string
	i := 12
	for i < len(m) && m[i] != 0 {
		l := int(m[i])
		if l > 63 || i+1+l > len(m) {
			return "", 0, false
		}
		labels = append(labels, string(m[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(m) {
		return "", 0, false
	}
	return strings.Join(labels, ".") + ".", i + 5, true
}

// queryMessage is a query for name (dotted, without the root's dot), type A.
func queryMessage(id uint16, name string) []byte {
	m := binary.BigEndian.AppendUint16(nil, id)
	m = append(m, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD, one question
	for _, l := range strings.Split(name, ".") {
		m = append(m, byte(len(l)))
		m = append(m, l...)
	}
	return append(m, 0, 0, 1, 0, 1) // root, type A, class IN
}

// answer is what the test's client saw of one query.
type answer struct {
	name     string
	rcode    int
	latency  time.Duration // from before the send to after the receive
	timedOut bool
}

// ask sends one query from a socket of its own inside h to server and
// waits up to wait for the answer, timing it as a resolver would.
func ask(t *testing.T, h netns.Handle, server netip.AddrPort, id uint16, name string, wait time.Duration) answer {
	t.Helper()
	var c *net.UDPConn
	if err := h.Do(func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
		return err
	}); err != nil {
		t.Fatalf("client in %s: %v", h, err)
	}
	defer c.Close()
	buf := make([]byte, 1500)
	start := time.Now()
	if _, err := c.Write(queryMessage(id, name)); err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	_ = c.SetReadDeadline(start.Add(wait))
	for {
		n, err := c.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return answer{name: name, timedOut: true}
			}
			t.Fatalf("answer to %s: %v", name, err)
		}
		if n < 12 || binary.BigEndian.Uint16(buf[0:2]) != id {
			continue
		}
		return answer{name: name, rcode: int(buf[3] & 0xf), latency: time.Since(start)}
	}
}
