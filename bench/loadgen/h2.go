package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The simulated agents speak gRPC over HTTP/2 themselves, not through
// grpc-go's client: each node's stream is still a real gRPC stream (its
// own HEADERS, its messages in DATA frames under the collector's flow
// control, its status in trailers), but what grpc-go holds for a stream
// is not held a thousand times over. grpc-go's client stream costs a
// goroutine waiting in Recv (4 KiB of stack once grown), a second one
// watching the stream's context (another 4 KiB: a new goroutine starts at
// the runtime's average stack size), its clientStream, attempt, transport
// stream, flow-control and context objects (about 4 KiB of heap), and a
// connection's reader and writer goroutines with their buffers: that was
// 18 KiB a node at rest and 29 KiB as it ran (BENCHMARKS.md, "The
// simulator's memory per node"). Here a connection has one goroutine,
// its reader, which hands each node its answers; a node's reports are
// written by the timer that builds them, under the stream's and the
// connection's send windows, from a buffer given back once written.

// h2conn is one HTTP/2 connection to the collector, carrying the streams
// of the nodes that share it (Config.NodesPerConn) or of one node.
type h2conn struct {
	nc        net.Conn
	authority string
	gone      func(*h2conn)

	// wmu orders writes on the connection: a frame is written whole, and
	// HEADERS in the order of their stream ids and of the encoder's table.
	wmu  sync.Mutex
	hdr  [9]byte
	vec  net.Buffers
	henc *hpack.Encoder
	hbuf bytes.Buffer

	mu          sync.Mutex
	cond        sync.Cond // on mu: a send window grew, or a stream or the connection ended
	streams     map[uint32]*h2stream
	nextID      uint32
	sendWindow  int64  // the connection's, for DATA we send
	initWindow  int64  // the collector's SETTINGS_INITIAL_WINDOW_SIZE: a new stream's send window
	maxFrame    int    // the collector's SETTINGS_MAX_FRAME_SIZE
	err         error  // once set, no new streams: the connection ended or is going away
	closed      bool   // the connection ended
	recvUnacked uint32 // DATA received on the connection not yet given back in a WINDOW_UPDATE
}

// h2stream is one node's gRPC stream.
type h2stream struct {
	c  *h2conn
	id uint32
	h  streamHandler

	// Under c.mu.
	sendWindow int64
	ended      bool

	// The reader's own.
	buf         []byte // a message whose DATA frames have not all come
	recvUnacked uint32
}

// streamHandler is told of a stream's messages and its end, on the
// connection's reader: neither may block.
type streamHandler interface {
	message(b []byte) error // one gRPC message's bytes, valid until it returns
	ended(err error)        // once: a status error (trailers, reset) or the connection's end
}

const (
	h2InitialWindow = 65535   // RFC 9113's, before the collector's SETTINGS
	h2MaxFrame      = 16384   // RFC 9113's default SETTINGS_MAX_FRAME_SIZE
	h2WindowUpdate  = 16384   // DATA received before its window is given back
	maxRecvMsg      = 4 << 20 // an answer larger than this ends the stream
)

// dialH2 connects to addr and starts the connection's reader.
// gone is called once the connection has ended.
func dialH2(ctx context.Context, addr string, gone func(*h2conn)) (*h2conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "dial %s: %v", addr, err)
	}
	c := &h2conn{nc: nc, authority: addr, gone: gone, streams: map[uint32]*h2stream{}, nextID: 1,
		sendWindow: h2InitialWindow, initWindow: h2InitialWindow, maxFrame: h2MaxFrame}
	c.cond.L = &c.mu
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.wmu.Lock()
	// The client preface and an empty SETTINGS frame: RFC 9113's defaults
	// suit a client that only receives acknowledgements.
	_, err = c.write([]byte(http2.ClientPreface))
	if err == nil {
		err = c.frameLocked(http2.FrameSettings, 0, 0)
	}
	c.wmu.Unlock()
	if err != nil {
		nc.Close()
		return nil, status.Errorf(codes.Unavailable, "start HTTP/2 with %s: %v", addr, err)
	}
	go c.read()
	return c, nil
}

// write writes b to the connection; wmu is held.
func (c *h2conn) write(b []byte) (int, error) { return c.nc.Write(b) }

// frameLocked writes one frame whose payload is the concatenation of p;
// wmu is held.
func (c *h2conn) frameLocked(t http2.FrameType, flags http2.Flags, id uint32, p ...[]byte) error {
	n := 0
	for _, b := range p {
		n += len(b)
	}
	c.hdr = [9]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(t), byte(flags)}
	binary.BigEndian.PutUint32(c.hdr[5:], id&(1<<31-1))
	c.vec = append(append(c.vec[:0], c.hdr[:]), p...)
	v := c.vec
	_, err := v.WriteTo(c.nc)
	clear(c.vec[:cap(c.vec)])
	return err
}

func (c *h2conn) frame(t http2.FrameType, flags http2.Flags, id uint32, p ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.frameLocked(t, flags, id, p...)
}

// close ends the connection; its reader then ends every stream on it.
func (c *h2conn) close() { c.nc.Close() }

// usable says whether a new stream may start on the connection.
func (c *h2conn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// newStream opens a stream of AgentService.Connect: its HEADERS are
// written before this returns.
func (c *h2conn) newStream(h streamHandler) (*h2stream, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	s := &h2stream{c: c, id: c.nextID, h: h, sendWindow: c.initWindow}
	c.nextID += 2
	if c.nextID > 1<<31-1 {
		// Stream ids are spent: the next stream goes on a new connection.
		c.err = status.Error(codes.Unavailable, "the connection's stream ids are spent")
	}
	c.streams[s.id] = s
	c.mu.Unlock()
	c.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: nbsv1.AgentService_Connect_FullMethodName},
		{Name: ":authority", Value: c.authority},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "user-agent", Value: "nbs-loadgen"},
		{Name: "te", Value: "trailers"},
	} {
		if err := c.henc.WriteField(f); err != nil {
			return nil, err
		}
	}
	// A header block this small always fits one frame.
	if err := c.frameLocked(http2.FrameHeaders, http2.FlagHeadersEndHeaders, s.id, c.hbuf.Bytes()); err != nil {
		c.fail(err)
		return nil, status.Errorf(codes.Unavailable, "open stream: %v", err)
	}
	return s, nil
}

// send writes one gRPC message whose bytes are the concatenation of p
// (p[0] begins with the 5-byte prefix, filled in here), waiting for the
// stream's and the connection's send windows. io.EOF: the stream ended
// (its handler is told why).
func (s *h2stream) send(p ...[]byte) error {
	n := 0
	for _, b := range p {
		n += len(b)
	}
	p[0][0] = 0
	binary.BigEndian.PutUint32(p[0][1:5], uint32(n-5))
	c := s.c
	var chunk [][]byte
	for n > 0 {
		c.mu.Lock()
		for !s.ended && !c.closed && (s.sendWindow <= 0 || c.sendWindow <= 0) {
			c.cond.Wait()
		}
		if s.ended || c.closed {
			c.mu.Unlock()
			return io.EOF
		}
		k := int(min(int64(n), s.sendWindow, c.sendWindow, int64(c.maxFrame)))
		s.sendWindow -= int64(k)
		c.sendWindow -= int64(k)
		c.mu.Unlock()
		// The frame's payload: the next k bytes of p.
		chunk = chunk[:0]
		for left := k; left > 0; {
			b := p[0]
			if len(b) > left {
				b = b[:left]
			}
			chunk = append(chunk, b)
			left -= len(b)
			if len(b) == len(p[0]) {
				p = p[1:]
			} else {
				p[0] = p[0][len(b):]
			}
		}
		n -= k
		if err := c.frame(http2.FrameData, 0, s.id, chunk...); err != nil {
			c.fail(err)
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}

// cancel ends the stream from this side (RST_STREAM CANCEL, as grpc-go's
// client does when a stream's context ends); its handler is told.
func (s *h2stream) cancel() {
	s.c.end(s, status.Error(codes.Canceled, "stream cancelled by the node"), http2.ErrCodeCancel)
}

// end ends stream s once: it leaves the connection, its senders wake, a
// RST_STREAM with code goes out unless code is ^0, and its handler is told.
func (c *h2conn) end(s *h2stream, err error, code http2.ErrCode) {
	c.mu.Lock()
	if s.ended {
		c.mu.Unlock()
		return
	}
	s.ended = true
	delete(c.streams, s.id)
	dead := c.closed
	c.cond.Broadcast()
	c.mu.Unlock()
	if code != ^http2.ErrCode(0) && !dead {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(code))
		_ = c.frame(http2.FrameRSTStream, 0, s.id, b[:])
	}
	s.h.ended(err)
}

// fail ends the connection and every stream on it with err.
func (c *h2conn) fail(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if c.err == nil {
		c.err = status.Errorf(codes.Unavailable, "connection to the collector ended: %v", err)
	}
	streams := c.streams
	c.streams = map[uint32]*h2stream{}
	for _, s := range streams {
		s.ended = true
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
	for _, s := range streams {
		s.h.ended(status.Errorf(codes.Unavailable, "connection to the collector ended: %v", err))
	}
	c.gone(c)
}

// read is the connection's one goroutine: it reads every frame the
// collector sends until the connection ends.
func (c *h2conn) read() {
	// A small buffer: the collector's frames are mostly acks of a few
	// dozen bytes, and a connection's buffer is a quarter of a node's.
	fr := http2.NewFramer(io.Discard, bufio.NewReaderSize(c.nc, 512))
	fr.SetReuseFrames()
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 64 << 10
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if s := c.stream(se.StreamID); s != nil {
					c.end(s, status.Errorf(codes.Internal, "stream: %v", se), http2.ErrCodeProtocol)
				}
				continue
			}
			c.fail(err)
			return
		}
		if err := c.handle(f); err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *h2conn) stream(id uint32) *h2stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

func (c *h2conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		c.mu.Lock()
		err := f.ForeachSetting(func(s http2.Setting) error {
			switch s.ID {
			case http2.SettingInitialWindowSize:
				delta := int64(s.Val) - c.initWindow
				c.initWindow = int64(s.Val)
				for _, st := range c.streams {
					st.sendWindow += delta
				}
			case http2.SettingMaxFrameSize:
				c.maxFrame = int(s.Val)
			}
			return nil
		})
		c.cond.Broadcast()
		c.mu.Unlock()
		if err != nil {
			return err
		}
		return c.frame(http2.FrameSettings, http2.FlagSettingsAck, 0)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		return c.frame(http2.FramePing, http2.FlagPingAck, 0, f.Data[:])
	case *http2.WindowUpdateFrame:
		c.mu.Lock()
		if f.StreamID == 0 {
			c.sendWindow += int64(f.Increment)
		} else if s := c.streams[f.StreamID]; s != nil {
			s.sendWindow += int64(f.Increment)
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	case *http2.DataFrame:
		// Flow control counts the whole frame, padding included, whether
		// or not its stream is still there.
		n := f.Header().Length
		c.recvUnacked += n
		if c.recvUnacked >= h2WindowUpdate {
			if err := c.windowUpdate(0, c.recvUnacked); err != nil {
				return err
			}
			c.recvUnacked = 0
		}
		s := c.stream(f.StreamID)
		if s == nil {
			return nil
		}
		s.recvUnacked += n
		if err := s.data(f.Data()); err != nil {
			c.end(s, err, http2.ErrCodeCancel)
			return nil
		}
		if f.StreamEnded() {
			c.end(s, status.Error(codes.Internal, "the stream ended without trailers"), ^http2.ErrCode(0))
			return nil
		}
		if s.recvUnacked >= h2WindowUpdate {
			if err := c.windowUpdate(s.id, s.recvUnacked); err != nil {
				return err
			}
			s.recvUnacked = 0
		}
	case *http2.MetaHeadersFrame:
		s := c.stream(f.StreamID)
		if s == nil {
			return nil
		}
		if !f.StreamEnded() {
			// The response's headers: HTTP status 200, or the stream fails.
			if st := f.PseudoValue("status"); st != "" && st != "200" {
				c.end(s, status.Errorf(codes.Unknown, "HTTP status %s", st), http2.ErrCodeCancel)
			}
			return nil
		}
		// Trailers (or a trailers-only response): the stream's status.
		c.end(s, trailerStatus(f), http2.ErrCodeNo)
	case *http2.RSTStreamFrame:
		if s := c.stream(f.StreamID); s != nil {
			c.end(s, status.Errorf(rstCode(f.ErrCode), "stream reset by the collector: %v", f.ErrCode), ^http2.ErrCode(0))
		}
	case *http2.GoAwayFrame:
		// No new streams; those the collector will not process end now,
		// the others run on until it closes the connection.
		c.mu.Lock()
		if c.err == nil {
			c.err = status.Errorf(codes.Unavailable, "the collector sent GOAWAY (%v)", f.ErrCode)
		}
		var refused []*h2stream
		for id, s := range c.streams {
			if id > f.LastStreamID {
				refused = append(refused, s)
			}
		}
		c.mu.Unlock()
		for _, s := range refused {
			c.end(s, status.Error(codes.Unavailable, "the collector went away before the stream started"), ^http2.ErrCode(0))
		}
	}
	return nil
}

func (c *h2conn) windowUpdate(id, n uint32) error {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return c.frame(http2.FrameWindowUpdate, 0, id, b[:])
}

// data takes a DATA frame's payload: whole messages go to the handler
// from the frame itself, a message split over frames waits in buf.
func (s *h2stream) data(p []byte) error {
	if len(s.buf) > 0 {
		s.buf = append(s.buf, p...)
		p = s.buf
	}
	for len(p) >= 5 {
		if p[0] != 0 {
			return status.Error(codes.Internal, "a compressed message (the simulator asks for none)")
		}
		n := binary.BigEndian.Uint32(p[1:5])
		if n > maxRecvMsg {
			return status.Errorf(codes.ResourceExhausted, "a message of %d bytes", n)
		}
		if uint32(len(p)-5) < n {
			break
		}
		if err := s.h.message(p[5 : 5+n]); err != nil {
			return err
		}
		p = p[5+n:]
	}
	if len(p) == 0 {
		s.buf = nil
	} else {
		s.buf = append(s.buf[:0], p...) // p may be buf's own tail: copy moves it down
	}
	return nil
}

// trailerStatus is the gRPC status a stream's trailers carry.
func trailerStatus(f *http2.MetaHeadersFrame) error {
	code, msg := "", ""
	for _, hf := range f.Fields {
		switch hf.Name {
		case "grpc-status":
			code = hf.Value
		case "grpc-message":
			msg = decodeGRPCMessage(hf.Value)
		}
	}
	if code == "" {
		if st := f.PseudoValue("status"); st != "" && st != "200" {
			return status.Errorf(codes.Unknown, "HTTP status %s", st)
		}
		return status.Error(codes.Internal, "trailers without grpc-status")
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc-status %q", code)
	}
	return status.Error(codes.Code(n), msg)
}

// decodeGRPCMessage undoes grpc-message's percent-encoding.
func decodeGRPCMessage(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if b, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil {
				out = append(out, byte(b))
				i += 2
				continue
			}
		}
		out = append(out, v[i])
	}
	return string(out)
}

// rstCode is the gRPC code of an HTTP/2 reset, as grpc-go maps it.
func rstCode(e http2.ErrCode) codes.Code {
	switch e {
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable
	case http2.ErrCodeCancel:
		return codes.Canceled
	case http2.ErrCodeFlowControl, http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal
}
