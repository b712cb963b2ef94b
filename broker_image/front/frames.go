package main

// Framed calls to popack: the hot v2 methods without a second gRPC hop.
//
// popack serves SendMessage, AckMessage, ChangeInvisibleDuration and the batched
// receive a second time on <its socket>.frames, as length-prefixed frames
// (Python: popbroker.grpc.frontframes, on the store wire's framing,
// popbroker.store.wire.frames). All integers are big-endian:
//
//	request:  u32 size | u32 call id | u8 len(method) | method | envelope
//	cancel:   u32 size | u32 call id | u8 0
//	answer:   u32 size | u32 call id | u8 code | payload
//
// size counts the bytes after itself. The envelope carries what gRPC would:
//
//	u32 timeout ms (0xFFFFFFFF: none) | u16 metadata count |
//	per entry: u8 len(key) | key | u32 len(value) | value | the v2 request
//
// An answer's code is 0 with the serialized response, or a gRPC status code with
// u8 len(name) | name | message. Many calls share one connection and are answered
// in any order. When a caller goes first (cancel, deadline) a cancel frame tells
// popack to stop that call. A lost connection fails the calls in flight with
// UNAVAILABLE (the clients retry, as after any lost connection); later calls go
// over gRPC until the frames connect again (tried at most once a second), so a
// popack without the frames socket is served as before.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	framesSuffix      = ".frames"
	maxFrameBytes     = 256 << 20 // as popack's
	noTimeout         = math.MaxUint32
	framesRetryPeriod = time.Second
)

var framedMethods = map[string]bool{
	"/apache.rocketmq.v2.MessagingService/SendMessage":             true,
	"/apache.rocketmq.v2.MessagingService/AckMessage":              true,
	"/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration": true,
	frontReceive: true,
}

// framesPathOf is the frames socket of a unix:// upstream target, "" for others.
func framesPathOf(target string) string {
	if !strings.HasPrefix(target, "unix:") {
		return ""
	}
	path := strings.TrimPrefix(target, "unix:")
	if strings.HasPrefix(path, "//") {
		path = "/" + strings.TrimLeft(path, "/")
	}
	return path + framesSuffix
}

type answer struct {
	code    uint8
	payload []byte
}

// frameConn is one connection to popack's frames socket and its calls in flight.
type frameConn struct {
	c       net.Conn
	writeMu sync.Mutex
	queued  net.Buffers   // frames for the writer goroutine (writeMu)
	wake    chan struct{} // capacity 1: frames were queued
	mu      sync.Mutex
	pending map[uint32]chan answer
	nextID  uint32
	dead    chan struct{} // closed when the connection is lost
	err     error         // why, once dead is closed
}

func (fc *frameConn) readAnswers() {
	var err error
	defer func() { fc.fail(err) }()
	// Buffered: popack writes the answers that finish together in one write, and
	// they are read here with one system call, not two per answer.
	in := bufio.NewReaderSize(fc.c, 64<<10)
	head := make([]byte, 9)
	for {
		if _, err = io.ReadFull(in, head); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(head[0:4])
		if size < 5 || size > maxFrameBytes {
			err = fmt.Errorf("answer frame size %d out of range", size)
			return
		}
		id := binary.BigEndian.Uint32(head[4:8])
		payload := make([]byte, size-5)
		if _, err = io.ReadFull(in, payload); err != nil {
			return
		}
		fc.mu.Lock()
		waiter, ok := fc.pending[id]
		delete(fc.pending, id)
		fc.mu.Unlock()
		if ok {
			waiter <- answer{code: head[8], payload: payload}
		}
	}
}

func (fc *frameConn) fail(err error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	select {
	case <-fc.dead:
		return
	default:
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = errors.New("popack closed the frames connection")
	}
	fc.err = err
	close(fc.dead)
	fc.c.Close()
	fc.pending = nil
}

// register reserves a call id; false when the connection is already lost.
func (fc *frameConn) register() (uint32, chan answer, bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.pending == nil {
		return 0, nil, false
	}
	fc.nextID++
	waiter := make(chan answer, 1)
	fc.pending[fc.nextID] = waiter
	return fc.nextID, waiter, true
}

func (fc *frameConn) forget(id uint32) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.pending != nil {
		delete(fc.pending, id)
	}
}

// write queues frame for the connection's writer goroutine; an error only when
// the connection is already lost. Frames queued while a write is in progress go
// together in the next one (one writev), as a group commit does, and no caller
// waits for others' frames to be written. A failed write fails the connection,
// and with it every call in flight.
func (fc *frameConn) write(frame []byte) error {
	select {
	case <-fc.dead:
		return fc.err
	default:
	}
	fc.writeMu.Lock()
	fc.queued = append(fc.queued, frame)
	fc.writeMu.Unlock()
	select {
	case fc.wake <- struct{}{}:
	default: // already woken: it will take this frame too
	}
	return nil
}

// writeFrames is the connection's writer goroutine (see write).
func (fc *frameConn) writeFrames() {
	for {
		select {
		case <-fc.dead:
			return
		case <-fc.wake:
		}
		fc.writeMu.Lock()
		batch := fc.queued
		fc.queued = nil
		fc.writeMu.Unlock()
		if _, err := batch.WriteTo(fc.c); err != nil {
			fc.fail(err)
			return
		}
	}
}

// frames is popfront's client of popack's frames socket.
type frames struct {
	path string
	dial func(path string) (net.Conn, error)
	now  func() time.Time

	mu       sync.Mutex
	conn     *frameConn
	nextDial time.Time
}

func newFrames(path string) *frames {
	return &frames{
		path: path,
		dial: func(p string) (net.Conn, error) { return net.DialTimeout("unix", p, time.Second) },
		now:  time.Now,
	}
}

// connection is the live connection, dialling one if the last try is a period old;
// nil means: use gRPC for this call.
func (f *frames) connection() *frameConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn != nil {
		select {
		case <-f.conn.dead:
			f.conn = nil
		default:
			return f.conn
		}
	}
	now := f.now()
	if now.Before(f.nextDial) {
		return nil
	}
	f.nextDial = now.Add(framesRetryPeriod)
	c, err := f.dial(f.path)
	if err != nil {
		return nil
	}
	f.conn = &frameConn{
		c: c, pending: map[uint32]chan answer{}, dead: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	go f.conn.readAnswers()
	go f.conn.writeFrames()
	log.Printf("hot calls go framed to %s", f.path)
	return f.conn
}

func (f *frames) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn != nil {
		f.conn.fail(errors.New("popfront is stopping"))
		f.conn = nil
	}
}

// envelope is a framed request's bytes after the method (see the file comment).
func envelope(ctx context.Context, request []byte) ([]byte, error) {
	timeout := uint32(noTimeout)
	if deadline, ok := ctx.Deadline(); ok {
		ms := time.Until(deadline).Milliseconds()
		switch {
		case ms < 0:
			timeout = 0
		case ms < noTimeout:
			timeout = uint32(ms)
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	size, count := 6+len(request), 0
	for key, values := range md {
		if strings.HasPrefix(key, ":") {
			continue
		}
		if len(key) > math.MaxUint8 {
			return nil, fmt.Errorf("metadata key of %d bytes", len(key))
		}
		for _, v := range values {
			size += 1 + len(key) + 4 + len(v)
			count++
		}
	}
	if count > math.MaxUint16 {
		return nil, fmt.Errorf("%d metadata entries", count)
	}
	out := make([]byte, 0, size)
	out = binary.BigEndian.AppendUint32(out, timeout)
	out = binary.BigEndian.AppendUint16(out, uint16(count))
	for key, values := range md {
		if strings.HasPrefix(key, ":") {
			continue
		}
		for _, v := range values {
			out = append(out, byte(len(key)))
			out = append(out, key...)
			out = binary.BigEndian.AppendUint32(out, uint32(len(v)))
			out = append(out, v...)
		}
	}
	return append(out, request...), nil
}

// call sends one framed call on fc and waits for its answer or the caller's end.
func (fc *frameConn) call(ctx context.Context, method string, request []byte) (frame, error) {
	body, err := envelope(ctx, request)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "popfront: %v", err)
	}
	id, waiter, ok := fc.register()
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "popfront: popack's frames: %v", fc.err)
	}
	size := 4 + 1 + len(method) + len(body)
	if size > maxFrameBytes {
		fc.forget(id)
		return nil, status.Errorf(codes.ResourceExhausted, "popfront: a request of %d bytes", size)
	}
	out := make([]byte, 0, 4+size)
	out = binary.BigEndian.AppendUint32(out, uint32(size))
	out = binary.BigEndian.AppendUint32(out, id)
	out = append(out, byte(len(method)))
	out = append(out, method...)
	out = append(out, body...)
	if err := fc.write(out); err != nil {
		fc.forget(id)
		return nil, status.Errorf(codes.Unavailable, "popfront: popack's frames: %v", err)
	}
	select {
	case a := <-waiter:
		return decodeAnswer(a)
	case <-ctx.Done():
		fc.forget(id)
		cancel := binary.BigEndian.AppendUint32(make([]byte, 0, 9), 5)
		cancel = binary.BigEndian.AppendUint32(cancel, id)
		_ = fc.write(append(cancel, 0))
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-fc.dead:
		return nil, status.Errorf(codes.Unavailable, "popfront: popack's frames: %v", fc.err)
	}
}

// decodeAnswer is the response of a code-0 answer, else the status it carries.
func decodeAnswer(a answer) (frame, error) {
	if a.code == 0 {
		return frame(a.payload), nil
	}
	message := "popack answered with an unreadable error"
	if len(a.payload) > 0 && len(a.payload) >= 1+int(a.payload[0]) {
		message = string(a.payload[1+int(a.payload[0]):])
	}
	return nil, status.Error(codes.Code(a.code), message)
}
