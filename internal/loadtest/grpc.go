package loadtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
)

// A cheap gRPC load loop: unary calls over plain-text HTTP/2, written and read by one
// goroutine per connection, the way an Envoy worker's event loop drives its rate limit
// calls. Every answer read is followed at once by that slot's next call, and all calls
// made after one read go out in one write. Requests are encoded once by the caller (the
// header block is constant), answers are handed over undecoded, so the client costs a
// few µs of CPU per call where grpc-go's costs tens: in a benchmark of servers sharing
// the machine with it, less of the CPU goes to the load generator. It speaks just
// enough HTTP/2 for gRPC servers (settings, pings, flow control, continuation frames,
// RST_STREAM); it is for tests only.

// GRPCLoad configures RunGRPC.
type GRPCLoad struct {
	Addr    string // host:port, plain text (h2c with prior knowledge)
	Method  string // full method, e.g. "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	Conc    int    // concurrent calls in all
	PerConn int    // concurrent calls per HTTP/2 connection (default 16)
	// Deadline is each call's deadline, sent as grpc-timeout; a call not answered within
	// it is cancelled (RST_STREAM) and reported with code DeadlineExceeded, as a gRPC
	// client does. 0: none.
	Deadline time.Duration
	// Request returns the encoded request message of call i of slot w (0 ≤ w < Conc). It
	// must not be changed while the call is under way.
	Request func(w, i int) []byte
	// Answer is called with each call's gRPC status code, grpc-message and answer message
	// (nil unless code is 0; valid only during the call). An error stops the run.
	Answer func(w, i int, code int, msg string, resp []byte) error
}

// gRPC status codes the loop itself reports.
const (
	CodeOK               = 0
	CodeDeadlineExceeded = 4
	CodeInternal         = 13
)

// RunGRPC runs the calls of l until until: each slot starts calls until then, and the
// run ends when every call started has ended. Latencies count from the moment a call is
// queued for writing to the moment its trailers are read (or its deadline passed).
func RunGRPC(l GRPCLoad, until time.Time) (Stats, error) {
	if l.PerConn <= 0 {
		l.PerConn = 16
	}
	nconn := (l.Conc + l.PerConn - 1) / l.PerConn
	lat := make([][]time.Duration, nconn)
	errs := make([]error, nconn)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < nconn; c++ {
		first, n := c*l.PerConn, min(l.PerConn, l.Conc-c*l.PerConn)
		wg.Go(func() { lat[c], errs[c] = runConn(&l, first, n, until) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for c := range lat {
		if errs[c] != nil {
			return Stats{}, errs[c]
		}
		all = append(all, lat[c]...)
	}
	return Summarize(all, elapsed), nil
}

const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	ourStreamWindow = 1 << 20
	ourConnWindow   = 1 << 22
)

type slot struct {
	w, i     int
	stream   uint32
	start    time.Time
	deadline time.Time
	active   bool
	code     int // -1 until grpc-status is read
	gmsg     string
	body     []byte // DATA received: gRPC-framed answer
}

type conn struct {
	l       *GRPCLoad
	nc      net.Conn
	wbuf    []byte
	header  []byte // the header block of the next call (see headerBlocks)
	later   []byte // the header block of every call after the first
	next    uint32 // next stream id
	streams map[uint32]*slot
	slots   []slot
	lat     []time.Duration
	until   time.Time
	sendWin int64   // connection send window
	waiting []*slot // calls waiting for send window
	recv    int     // DATA bytes received since the last connection WINDOW_UPDATE
	cur     *slot   // the call whose header block is being decoded (nil: none known)
}

func runConn(l *GRPCLoad, first, n int, until time.Time) ([]time.Duration, error) {
	nc, err := net.Dial("tcp", l.Addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	c := &conn{l: l, nc: nc, next: 1, streams: make(map[uint32]*slot, n), slots: make([]slot, n),
		until: until, sendWin: 65535, lat: make([]time.Duration, 0, 1<<16)}
	c.header, c.later = headerBlocks(l.Addr, l.Method, l.Deadline)

	c.wbuf = append(c.wbuf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"...)
	c.wbuf = appendFrameHeader(c.wbuf, 12, frameSettings, 0, 0)
	c.wbuf = binary.BigEndian.AppendUint16(c.wbuf, 0x2) // ENABLE_PUSH
	c.wbuf = binary.BigEndian.AppendUint32(c.wbuf, 0)
	c.wbuf = binary.BigEndian.AppendUint16(c.wbuf, 0x4) // INITIAL_WINDOW_SIZE
	c.wbuf = binary.BigEndian.AppendUint32(c.wbuf, ourStreamWindow)
	c.wbuf = appendFrameHeader(c.wbuf, 4, frameWindowUpdate, 0, 0)
	c.wbuf = binary.BigEndian.AppendUint32(c.wbuf, ourConnWindow-65535)
	for k := range c.slots {
		c.slots[k].w = first + k
		c.call(&c.slots[k], time.Now())
	}

	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if c.cur == nil {
			return
		}
		switch f.Name {
		case "grpc-status":
			if v, err := strconv.Atoi(f.Value); err == nil {
				c.cur.code = v
			}
		case "grpc-message":
			c.cur.gmsg = f.Value
		}
	})
	rbuf := make([]byte, 64<<10)
	have := 0
	var hdrStream uint32 // stream of a header block continued in CONTINUATION frames
	var hdrEnd bool      // its HEADERS frame ended the stream
	for {
		if c.idle() {
			return c.lat, nil
		}
		if time.Now().After(until.Add(30 * time.Second)) {
			return nil, errors.New("loadtest: calls still unanswered 30s after the end of the run")
		}
		if len(c.wbuf) > 0 {
			if _, err := nc.Write(c.wbuf); err != nil {
				return nil, err
			}
			c.wbuf = c.wbuf[:0]
		}
		if l.Deadline > 0 {
			nc.SetReadDeadline(c.earliest())
		}
		if have == len(rbuf) {
			rbuf = append(rbuf, make([]byte, len(rbuf))...) // a frame larger than the buffer
		}
		m, err := nc.Read(rbuf[have:])
		have += m
		if err != nil {
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				return nil, err
			}
		}
		// every complete frame read
		off := 0
		for have-off >= 9 {
			length := int(rbuf[off])<<16 | int(rbuf[off+1])<<8 | int(rbuf[off+2])
			if have-off < 9+length {
				break
			}
			typ, flags := rbuf[off+3], rbuf[off+4]
			sid := binary.BigEndian.Uint32(rbuf[off+5:]) & 0x7fffffff
			p := rbuf[off+9 : off+9+length]
			off += 9 + length
			switch typ {
			case frameSettings:
				if flags&flagAck == 0 {
					c.wbuf = appendFrameHeader(c.wbuf, 0, frameSettings, flagAck, 0)
				}
			case framePing:
				if flags&flagAck == 0 {
					c.wbuf = appendFrameHeader(c.wbuf, 8, framePing, flagAck, 0)
					c.wbuf = append(c.wbuf, p...)
				}
			case frameWindowUpdate:
				if sid == 0 && len(p) == 4 {
					c.sendWin += int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
					for len(c.waiting) > 0 && c.send(c.waiting[0]) {
						c.waiting = c.waiting[1:]
					}
				}
			case frameGoAway:
				return nil, fmt.Errorf("loadtest: the server sent GOAWAY (%x)", p)
			case frameRSTStream:
				if s := c.streams[sid]; s != nil && len(p) == 4 {
					if err := c.end(s, CodeInternal, fmt.Sprintf("stream reset by the server, HTTP/2 error %d", binary.BigEndian.Uint32(p)), time.Now()); err != nil {
						return nil, err
					}
				}
			case frameData:
				if flags&flagPadded != 0 && len(p) > 0 {
					p = p[1 : len(p)-int(p[0])]
				}
				if c.recv += length; c.recv >= ourConnWindow/4 {
					c.wbuf = appendFrameHeader(c.wbuf, 4, frameWindowUpdate, 0, 0)
					c.wbuf = binary.BigEndian.AppendUint32(c.wbuf, uint32(c.recv))
					c.recv = 0
				}
				if s := c.streams[sid]; s != nil {
					s.body = append(s.body, p...)
					if flags&flagEndStream != 0 { // no trailers
						if err := c.end(s, CodeInternal, "no grpc-status", time.Now()); err != nil {
							return nil, err
						}
					}
				}
			case frameHeaders, frameContinuation:
				if typ == frameHeaders {
					if flags&flagPadded != 0 && len(p) > 0 {
						p = p[1 : len(p)-int(p[0])]
					}
					if flags&flagPriority != 0 && len(p) >= 5 {
						p = p[5:]
					}
					hdrStream, hdrEnd = sid, flags&flagEndStream != 0
				}
				c.cur = c.streams[hdrStream] // nil for a cancelled call: decoded all the same (HPACK state)
				if _, err := dec.Write(p); err != nil {
					return nil, fmt.Errorf("loadtest: HPACK: %w", err)
				}
				if flags&flagEndHeaders != 0 {
					if err := dec.Close(); err != nil {
						return nil, fmt.Errorf("loadtest: HPACK: %w", err)
					}
					if s := c.cur; s != nil && hdrEnd {
						code, msg := s.code, s.gmsg
						if code < 0 {
							code, msg = CodeInternal, "no grpc-status"
						}
						if err := c.end(s, code, msg, time.Now()); err != nil {
							return nil, err
						}
					}
					c.cur = nil
				}
			}
		}
		have = copy(rbuf, rbuf[off:have])
		if l.Deadline > 0 {
			now := time.Now()
			for k := range c.slots {
				if s := &c.slots[k]; s.active && !now.Before(s.deadline) {
					// the caller gives up: cancel the stream, as a gRPC client does
					c.wbuf = appendFrameHeader(c.wbuf, 4, frameRSTStream, 0, s.stream)
					c.wbuf = binary.BigEndian.AppendUint32(c.wbuf, 0x8) // CANCEL
					if err := c.end(s, CodeDeadlineExceeded, "deadline exceeded", now); err != nil {
						return nil, err
					}
				}
			}
		}
	}
}

// call starts slot s's next call at now, unless the run is over.
func (c *conn) call(s *slot, now time.Time) {
	if !now.Before(c.until) {
		return
	}
	s.active, s.code, s.gmsg, s.body = true, -1, "", s.body[:0]
	s.start = now
	if c.l.Deadline > 0 {
		s.deadline = now.Add(c.l.Deadline)
	}
	s.stream = c.next
	c.next += 2
	c.streams[s.stream] = s
	if len(c.waiting) > 0 || !c.send(s) {
		c.waiting = append(c.waiting, s)
	}
}

// send writes s's HEADERS and DATA frames when the connection's send window has room.
func (c *conn) send(s *slot) bool {
	if !s.active { // ended (its deadline) while waiting
		return true
	}
	req := c.l.Request(s.w, s.i)
	if c.sendWin < int64(5+len(req)) {
		return false
	}
	c.sendWin -= int64(5 + len(req))
	c.wbuf = appendFrameHeader(c.wbuf, len(c.header), frameHeaders, flagEndHeaders, s.stream)
	c.wbuf = append(c.wbuf, c.header...)
	c.header = c.later
	c.wbuf = appendFrameHeader(c.wbuf, 5+len(req), frameData, flagEndStream, s.stream)
	c.wbuf = append(c.wbuf, 0)
	c.wbuf = binary.BigEndian.AppendUint32(c.wbuf, uint32(len(req)))
	c.wbuf = append(c.wbuf, req...)
	return true
}

// end records the end of s's call and starts its next.
func (c *conn) end(s *slot, code int, msg string, now time.Time) error {
	delete(c.streams, s.stream)
	s.active = false
	c.lat = append(c.lat, now.Sub(s.start))
	if c.l.Deadline > 0 && !now.Before(s.deadline) {
		// read after the caller's deadline (in the same read as its timer, or the
		// server's own reset at the deadline): the caller has given up already
		code, msg = CodeDeadlineExceeded, "deadline exceeded"
	}
	var resp []byte
	if code == CodeOK {
		if len(s.body) < 5 || int(binary.BigEndian.Uint32(s.body[1:])) != len(s.body)-5 || s.body[0] != 0 {
			code, msg = CodeInternal, fmt.Sprintf("not one uncompressed gRPC message: %d bytes", len(s.body))
		} else {
			resp = s.body[5:]
		}
	}
	if err := c.l.Answer(s.w, s.i, code, msg, resp); err != nil {
		return err
	}
	s.i++
	c.call(s, now)
	return nil
}

// idle reports whether no call is under way.
func (c *conn) idle() bool {
	for k := range c.slots {
		if c.slots[k].active {
			return false
		}
	}
	return true
}

// earliest is the nearest deadline of the calls under way.
func (c *conn) earliest() time.Time {
	var t time.Time
	for k := range c.slots {
		if s := &c.slots[k]; s.active && (t.IsZero() || s.deadline.Before(t)) {
			t = s.deadline
		}
	}
	return t
}

func appendFrameHeader(b []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

// headerBlocks encodes a call's request headers once, as an HTTP/2 client does the first
// time (literals the server adds to its HPACK table), and again as it does every later
// time (references to those entries only). The second block adds nothing to the table,
// so it can be sent again as is for every later call; Envoy's client sends the same
// headers (its timeout as grpc-timeout) on every call too.
func headerBlocks(authority, method string, deadline time.Duration) (first, later []byte) {
	var b headerBuf
	e := hpack.NewEncoder(&b)
	fields := []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: method},
		{Name: ":authority", Value: authority}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}
	if deadline > 0 {
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: strconv.FormatInt(deadline.Microseconds(), 10) + "u"})
	}
	for _, f := range fields {
		e.WriteField(f)
	}
	first = slices.Clone(b)
	b = b[:0]
	for _, f := range fields {
		e.WriteField(f)
	}
	return first, slices.Clone(b)
}

type headerBuf []byte

func (b *headerBuf) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }
