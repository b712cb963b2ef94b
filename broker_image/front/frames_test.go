package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// request is one frame as popack reads it.
type request struct {
	id       uint32
	method   string
	envelope []byte
}

// fakePopack accepts one connection on a frames socket and hands its frames to the test.
type fakePopack struct {
	lis      net.Listener
	conns    chan net.Conn
	requests chan request
}

func startFakePopack(t *testing.T) (*fakePopack, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "popack.sock.frames")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePopack{lis: lis, conns: make(chan net.Conn, 4), requests: make(chan request, 16)}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			f.conns <- c
			go f.read(c)
		}
	}()
	t.Cleanup(func() { lis.Close() })
	return f, path
}

func (f *fakePopack) read(c net.Conn) {
	for {
		head := make([]byte, 9)
		if _, err := io.ReadFull(c, head); err != nil {
			return
		}
		rest := make([]byte, binary.BigEndian.Uint32(head[0:4])-5)
		if _, err := io.ReadFull(c, rest); err != nil {
			return
		}
		n := int(head[8])
		f.requests <- request{id: binary.BigEndian.Uint32(head[4:8]), method: string(rest[:n]), envelope: rest[n:]}
	}
}

func answerFrame(id uint32, code uint8, payload []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(5+len(payload)))
	out = binary.BigEndian.AppendUint32(out, id)
	return append(append(out, code), payload...)
}

func next[T any](t *testing.T, ch chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("nothing arrived within 5 s")
	}
	var zero T
	return zero
}

type callResult struct {
	reply frame
	err   error
}

func callAsync(ctx context.Context, fc *frameConn, method string, req []byte) chan callResult {
	out := make(chan callResult, 1)
	go func() {
		reply, err := fc.call(ctx, method, req)
		out <- callResult{reply, err}
	}()
	return out
}

func TestFramedCallCarriesMetadataAndDeadlineAndGetsItsAnswer(t *testing.T) {
	popack, path := startFakePopack(t)
	f := newFrames(path)
	defer f.close()
	fc := f.connection()
	if fc == nil {
		t.Fatal("no connection to a listening frames socket")
	}
	conn := next(t, popack.conns)
	md := metadata.Pairs("x-mq-client-id", "c1", "authorization", "MQv2-HMAC-SHA1 x", ":authority", "front")
	ctx, cancel := context.WithTimeout(metadata.NewIncomingContext(context.Background(), md), 3*time.Second)
	defer cancel()
	first := callAsync(ctx, fc, frontReceive, []byte("receive"))
	second := callAsync(ctx, fc, framedMethodSend, []byte("send"))
	got := map[string]request{}
	for range 2 {
		r := next(t, popack.requests)
		got[r.method] = r
	}
	// Answers in the other order than the requests: the ids pair them.
	conn.Write(answerFrame(got[framedMethodSend].id, 0, []byte("sent")))
	conn.Write(answerFrame(got[frontReceive].id, uint8(codes.PermissionDenied), append([]byte{3}, "abcnot yours"...)))
	if r := next(t, second); r.err != nil || string(r.reply) != "sent" {
		t.Fatalf("send: %q %v", r.reply, r.err)
	}
	r := next(t, first)
	if st := status.Convert(r.err); st.Code() != codes.PermissionDenied || st.Message() != "not yours" {
		t.Fatalf("receive: want PermissionDenied 'not yours', got %v", r.err)
	}

	env := got[framedMethodSend].envelope
	timeout := binary.BigEndian.Uint32(env[0:4])
	if timeout < 2000 || timeout > 3000 {
		t.Fatalf("timeout %d ms, want about 3000", timeout)
	}
	entries, rest := parseEnvelopeForTest(t, env[4:])
	if string(rest) != "send" {
		t.Fatalf("request bytes %q", rest)
	}
	if entries["x-mq-client-id"] != "c1" || entries["authorization"] != "MQv2-HMAC-SHA1 x" {
		t.Fatalf("metadata %v", entries)
	}
	if _, ok := entries[":authority"]; ok {
		t.Fatal("a pseudo-header went upstream")
	}
}

const framedMethodSend = "/apache.rocketmq.v2.MessagingService/SendMessage"

func parseEnvelopeForTest(t *testing.T, b []byte) (map[string]string, []byte) {
	t.Helper()
	count := int(binary.BigEndian.Uint16(b[0:2]))
	b = b[2:]
	out := map[string]string{}
	for range count {
		k := int(b[0])
		key := string(b[1 : 1+k])
		b = b[1+k:]
		v := int(binary.BigEndian.Uint32(b[0:4]))
		out[key] = string(b[4 : 4+v])
		b = b[4+v:]
	}
	return out, b
}

func TestACallerThatGoesSendsACancelFrame(t *testing.T) {
	popack, path := startFakePopack(t)
	f := newFrames(path)
	defer f.close()
	fc := f.connection()
	next(t, popack.conns)
	ctx, cancel := context.WithCancel(context.Background())
	result := callAsync(ctx, fc, frontReceive, []byte("long poll"))
	sent := next(t, popack.requests)
	cancel()
	if r := next(t, result); status.Code(r.err) != codes.Canceled {
		t.Fatalf("want Canceled, got %v", r.err)
	}
	cancelFrame := next(t, popack.requests)
	if cancelFrame.id != sent.id || cancelFrame.method != "" || len(cancelFrame.envelope) != 0 {
		t.Fatalf("want a cancel frame for call %d, got %+v", sent.id, cancelFrame)
	}
}

func TestALostConnectionFailsCallsInFlightAndIsDialledAgainAfterAPeriod(t *testing.T) {
	popack, path := startFakePopack(t)
	clock := time.Unix(1000, 0)
	f := newFrames(path)
	f.now = func() time.Time { return clock }
	defer f.close()
	fc := f.connection()
	conn := next(t, popack.conns)
	result := callAsync(context.Background(), fc, framedMethodSend, []byte("x"))
	next(t, popack.requests)
	conn.Close()
	if r := next(t, result); status.Code(r.err) != codes.Unavailable {
		t.Fatalf("want Unavailable, got %v", r.err)
	}
	<-fc.dead
	if f.connection() != nil {
		t.Fatal("dialled again within the retry period")
	}
	clock = clock.Add(framesRetryPeriod)
	again := f.connection()
	if again == nil || again == fc {
		t.Fatal("no new connection after the retry period")
	}
	next(t, popack.conns)
}

func TestNoFramesSocketMeansGRPCAndOneDialAPeriod(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.frames")
	dials := 0
	f := newFrames(path)
	clock := time.Unix(1000, 0)
	f.now = func() time.Time { return clock }
	f.dial = func(p string) (net.Conn, error) { dials++; return nil, errors.New("no such socket") }
	for range 3 {
		if f.connection() != nil {
			t.Fatal("a connection without a socket")
		}
	}
	clock = clock.Add(framesRetryPeriod)
	f.connection()
	if dials != 2 {
		t.Fatalf("%d dials, want one per period (2)", dials)
	}
}

func TestFramesPathOfUnixTargetsOnly(t *testing.T) {
	for target, want := range map[string]string{
		"unix:///data/popack.sock": "/data/popack.sock.frames",
		"unix:/data/popack.sock":   "/data/popack.sock.frames",
		"127.0.0.1:8081":           "",
	} {
		if got := framesPathOf(target); got != want {
			t.Errorf("framesPathOf(%q) = %q, want %q", target, got, want)
		}
	}
}

func TestConcurrentCallsKeepTheirFramesWholeAndAnswersInOneWriteReachEachCaller(t *testing.T) {
	popack, path := startFakePopack(t)
	f := newFrames(path)
	defer f.close()
	fc := f.connection()
	conn := next(t, popack.conns)
	const calls = 64
	results := make([]chan callResult, calls)
	for i := range calls {
		results[i] = callAsync(context.Background(), fc, framedMethodSend, []byte(fmt.Sprintf("request %d", i)))
	}
	// Every frame arrives whole (the fake parses them one by one), however the
	// writes of concurrent callers were combined; all answers go back in one write.
	var answers []byte
	for range calls {
		r := next(t, popack.requests)
		_, body := parseEnvelopeForTest(t, r.envelope[4:])
		answers = append(answerFrame(r.id, 0, append([]byte("answer to "), body...)), answers...)
	}
	if _, err := conn.Write(answers); err != nil {
		t.Fatal(err)
	}
	for i, result := range results {
		r := next(t, result)
		if want := fmt.Sprintf("answer to request %d", i); r.err != nil || string(r.reply) != want {
			t.Fatalf("call %d: got %q %v, want %q", i, r.reply, r.err, want)
		}
	}
}

// stallingConn holds its first Write until released, then fails it.
type stallingConn struct {
	net.Conn
	writing chan struct{}
	release chan struct{}
}

func (c *stallingConn) Write(b []byte) (int, error) {
	close(c.writing)
	<-c.release
	return 0, errors.New("broken pipe")
}

func TestAFailedWriteFailsTheCallsQueuedBehindIt(t *testing.T) {
	ours, theirs := net.Pipe()
	defer theirs.Close()
	conn := &stallingConn{Conn: ours, writing: make(chan struct{}), release: make(chan struct{})}
	f := newFrames("unused")
	f.dial = func(string) (net.Conn, error) { return conn, nil }
	defer f.close()
	fc := f.connection()
	first := callAsync(context.Background(), fc, framedMethodSend, []byte("first"))
	<-conn.writing
	second := callAsync(context.Background(), fc, framedMethodSend, []byte("second"))
	for queued := 0; queued == 0; runtime.Gosched() { // the second frame waits for the write in progress
		fc.writeMu.Lock()
		queued = len(fc.queued)
		fc.writeMu.Unlock()
		select {
		case r := <-second:
			t.Fatalf("the second call ended before the write failed: %v", r.err)
		default:
		}
	}
	close(conn.release)
	for name, result := range map[string]chan callResult{"first": first, "second": second} {
		if r := next(t, result); status.Code(r.err) != codes.Unavailable {
			t.Fatalf("%s call: want Unavailable, got %v", name, r.err)
		}
	}
}
