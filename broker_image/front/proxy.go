package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	v2Receive    = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
	v2Send       = "/apache.rocketmq.v2.MessagingService/SendMessage"
	frontReceive = "/popfleet.front.v1.Front/ReceiveMessage"
)

// frame is one gRPC message, kept as its encoded bytes.
type frame []byte

// rawCodec moves frames without decoding them.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, status.Errorf(codes.Internal, "popfront: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*f)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return status.Errorf(codes.Internal, "popfront: cannot unmarshal into %T", v)
	}
	*f = data.Materialize()
	return nil
}

type proxy struct {
	upstream *grpc.ClientConn
	frames   *frames       // nil: every call over gRPC
	metrics  *frontMetrics // nil: not counted
}

func newProxy(upstream *grpc.ClientConn, framed *frames, metrics *frontMetrics) *proxy {
	return &proxy{upstream: upstream, frames: framed, metrics: metrics}
}

var bothStreams = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// handle serves any method: ReceiveMessage through the batched call, the rest as is.
func (p *proxy) handle(_ any, stream grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "popfront: no method name on the stream")
	}
	ctx := outgoing(stream.Context())
	if p.metrics != nil {
		p.metrics.inFlight.Inc()
		defer p.metrics.inFlight.Dec()
	}
	started := time.Now()
	var err error
	switch {
	case method == v2Receive:
		err = p.receive(ctx, stream)
	case framedMethods[method]:
		err = p.unary(ctx, method, stream)
	default:
		err = p.forward(ctx, method, stream)
	}
	p.metrics.observe(method, started, err)
	return err
}

// outgoing carries the client's metadata upstream. Pseudo-headers are dropped;
// grpc-go itself skips the transport's reserved headers (content-type, te, ...).
// The deadline and cancellation travel with the context.
func outgoing(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	out := make(metadata.MD, len(in))
	for key, values := range in {
		if !strings.HasPrefix(key, ":") {
			out[key] = values
		}
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// forward copies frames both ways until the upstream ends the call, then passes
// its headers, trailers and status to the client. It serves unary, server-streaming
// and bidi methods alike.
func (p *proxy) forward(ctx context.Context, method string, stream grpc.ServerStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up, err := p.upstream.NewStream(ctx, bothStreams, method)
	if err != nil {
		return err
	}
	go func() {
		for {
			var f frame
			if err := stream.RecvMsg(&f); err != nil {
				if errors.Is(err, io.EOF) {
					_ = up.CloseSend()
				} else {
					cancel() // the client is gone: end the upstream call too
				}
				return
			}
			if err := up.SendMsg(&f); err != nil {
				return // the upstream ended the call; its status comes from RecvMsg below
			}
		}
	}()
	headerSent := false
	for {
		var f frame
		err := up.RecvMsg(&f)
		if !headerSent {
			if md, herr := up.Header(); herr == nil && len(md) > 0 {
				if serr := stream.SendHeader(md); serr != nil {
					return serr
				}
			}
			headerSent = true
		}
		if err != nil {
			stream.SetTrailer(up.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := stream.SendMsg(&f); err != nil {
			return err
		}
	}
}

// invoke makes one unary call to popack: framed when the method is and the frames
// are connected, else over gRPC (whose header and trailer it returns too).
func (p *proxy) invoke(ctx context.Context, method string, request frame) (frame, metadata.MD, metadata.MD, error) {
	if p.frames != nil && framedMethods[method] {
		if fc := p.frames.connection(); fc != nil {
			p.metrics.upstreamCall(true)
			if method == v2Send {
				if items, encoded, total, ok := frontSendRequest(request); ok {
					p.metrics.sentMessages(encoded, total-encoded)
					method, request = frontSend, items
				}
			}
			reply, err := fc.call(ctx, method, request)
			return reply, nil, nil, err
		}
	}
	p.metrics.upstreamCall(false)
	var reply frame
	var header, trailer metadata.MD
	err := p.upstream.Invoke(ctx, method, &request, &reply, grpc.Header(&header), grpc.Trailer(&trailer))
	return reply, header, trailer, err
}

// unary answers a unary method from one upstream call (framedMethods).
func (p *proxy) unary(ctx context.Context, method string, stream grpc.ServerStream) error {
	reply, err := p.relay(ctx, method, stream)
	if err != nil {
		return err
	}
	return stream.SendMsg(&reply)
}

// relay reads the client's request, makes the upstream call as upstreamMethod and
// passes its header and trailer on; the reply is the caller's to send.
func (p *proxy) relay(ctx context.Context, upstreamMethod string, stream grpc.ServerStream) (frame, error) {
	var request frame
	if err := stream.RecvMsg(&request); err != nil {
		return nil, err
	}
	reply, header, trailer, err := p.invoke(ctx, upstreamMethod, request)
	if len(header) > 0 {
		if serr := stream.SendHeader(header); serr != nil {
			return nil, serr
		}
	}
	stream.SetTrailer(trailer)
	return reply, err
}

// receive answers a ReceiveMessage from one batched upstream call.
func (p *proxy) receive(ctx context.Context, stream grpc.ServerStream) error {
	batch, err := p.relay(ctx, frontReceive, stream)
	if err != nil {
		return err
	}
	items, err := splitBatch(batch)
	if err != nil {
		return status.Errorf(codes.Internal, "popfront: %v", err)
	}
	responses := make([]frame, len(items))
	built := 0
	for i, item := range items { // all built before the first is sent: nothing half answered
		if responses[i], err = response(item); err != nil {
			return status.Errorf(codes.Internal, "popfront: ReceiveBatch item %d: %v", i, err)
		}
		if item[0] == itemDelivery {
			built++
		}
	}
	p.metrics.responses(built, len(items)-built)
	for i := range responses {
		if err := stream.SendMsg(&responses[i]); err != nil {
			return err
		}
	}
	return nil
}

// response is the ReceiveMessageResponse of one ReceiveBatch item: the first byte
// says whether the rest is that response already serialized ('R') or a delivery
// to build ('D', delivery.go).
func response(item frame) (frame, error) {
	if len(item) == 0 {
		return nil, errors.New("empty item")
	}
	switch item[0] {
	case itemResponse:
		return item[1:], nil
	case itemDelivery:
		return buildResponse(item)
	}
	return nil, fmt.Errorf("unknown item kind 0x%02x", item[0])
}

// splitBatch reads a ReceiveBatch (repeated bytes responses = 1) into its items.
func splitBatch(b []byte) ([]frame, error) {
	var out []frame
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			return nil, errors.New("ReceiveBatch: unexpected field")
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		out = append(out, frame(v))
		b = b[m:]
	}
	return out, nil
}
