package main

// The RocketMQ v2 gRPC protocol (apache.rocketmq.v2.MessagingService), spoken the
// way the official clients speak it, with the stubs the official Go client module
// ships (protocol/v2):
//
//  1. QueryRoute for the topic; later calls go to the route's broker endpoint
//     (which must be on loopback);
//  2. a Telemetry stream per client, which first sends the client's settings
//     (PRODUCER with its topic, or SIMPLE_CONSUMER with group and subscription)
//     and waits for the server's settings reply: the RocketMQ proxy reads them on
//     every receive; one Heartbeat then and every 10 s;
//  3. SendMessage with a whole batch (the proxy answers a batch with one entry,
//     popfleet with one per message), ReceiveMessage as a server stream read to
//     its end (the queue rotates over the route like the official SimpleConsumer;
//     the call's deadline is await + request timeout, as the official Go client
//     sets it, since its stubs predate the request's long_polling_timeout),
//     AckMessage with one entry per message, ChangeInvisibleDuration one handle
//     at a time;
//  4. NotifyClientTermination on close.
//
// Every call carries the metadata the official client sends (x-mq-client-id,
// language, protocol, version, date-time, request id, namespace); no credentials.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	clientVersion  = "5.1.2" // the official Go client module whose stubs we use
	requestTimeout = 3 * time.Second
	heartbeatEvery = 10 * time.Second
)

var (
	hostName, _ = os.Hostname()
	idPrefix    = messageIDPrefix()
	idCounter   atomic.Uint32
	clientSeq   atomic.Int64
)

type v2Client struct {
	opts       options
	conn       *grpc.ClientConn
	stub       v2.MessagingServiceClient
	clientID   string
	clientType v2.ClientType
	queues     []*v2.MessageQueue
	next       atomic.Uint32
	stop       context.CancelFunc
	background sync.WaitGroup
}

type v2Handle struct {
	messageID string
	receipt   string
}

func dialV2(ctx context.Context, o options, r role, name string) (*v2Client, error) {
	c := &v2Client{
		opts:       o,
		clientID:   fmt.Sprintf("%s@%d@%s-%d@%s", hostName, os.Getpid(), name, clientSeq.Add(1), strconv.FormatInt(time.Now().UnixNano(), 36)),
		clientType: v2.ClientType_PRODUCER,
	}
	if r == roleConsumer {
		c.clientType = v2.ClientType_SIMPLE_CONSUMER
	}
	conn, err := dialLoopback(o.endpoint)
	if err != nil {
		return nil, err
	}
	c.conn, c.stub = conn, v2.NewMessagingServiceClient(conn)
	if err := c.queryRoute(ctx); err != nil {
		_ = c.conn.Close()
		return nil, err
	}
	bg, stop := context.WithCancel(context.Background())
	c.stop = stop
	if err := c.telemetry(ctx, bg); err != nil {
		c.closeConn()
		return nil, err
	}
	if err := c.heartbeat(ctx); err != nil {
		c.closeConn()
		return nil, err
	}
	c.background.Add(1)
	go c.heartbeats(bg)
	return c, nil
}

func dialLoopback(endpoint string) (*grpc.ClientConn, error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("endpoint %s is not a loopback address", endpoint)
	}
	return grpc.NewClient("passthrough:///"+endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
}

func (c *v2Client) sign(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx,
		"x-mq-language", "GO", // metadata.LanguageValue of the official Go client
		"x-mq-protocol", "v2",
		"x-mq-client-version", clientVersion,
		"x-mq-client-id", c.clientID,
		"x-mq-namespace", "",
		"x-mq-date-time", time.Now().UTC().Format("20060102T150405Z"),
		"x-mq-request-id", uuid.NewString(),
	)
}

func (c *v2Client) accessPoint() *v2.Endpoints {
	host, port, _ := net.SplitHostPort(c.opts.endpoint)
	p, _ := strconv.Atoi(port)
	return &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: host, Port: int32(p)}}}
}

func (c *v2Client) topic() *v2.Resource { return &v2.Resource{Name: c.opts.topic} }
func (c *v2Client) group() *v2.Resource { return &v2.Resource{Name: c.opts.group} }

func statusOK(s *v2.Status) bool {
	return s != nil && (s.Code == v2.Code_OK || s.Code == v2.Code_MULTIPLE_RESULTS)
}

func statusErr(rpc string, s *v2.Status) error {
	if s == nil {
		return fmt.Errorf("%s: no status", rpc)
	}
	return fmt.Errorf("%s: %s (%d) %s", rpc, s.Code, int32(s.Code), s.Message)
}

func (c *v2Client) queryRoute(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(c.sign(ctx), requestTimeout)
	defer cancel()
	reply, err := c.stub.QueryRoute(cctx, &v2.QueryRouteRequest{Topic: c.topic(), Endpoints: c.accessPoint()})
	if err != nil {
		return fmt.Errorf("QueryRoute: %w", err)
	}
	if !statusOK(reply.Status) {
		return statusErr("QueryRoute "+c.opts.topic, reply.Status)
	}
	var target string
	for _, q := range reply.MessageQueues {
		if q.Broker.GetId() != 0 || q.Permission == v2.Permission_NONE {
			continue // masters only, as the official clients keep them
		}
		addrs := q.Broker.GetEndpoints().GetAddresses()
		if len(addrs) == 0 {
			return fmt.Errorf("QueryRoute %s: queue %d without an endpoint", c.opts.topic, q.Id)
		}
		target = net.JoinHostPort(addrs[0].Host, strconv.Itoa(int(addrs[0].Port)))
		c.queues = append(c.queues, q)
	}
	if len(c.queues) == 0 {
		return fmt.Errorf("QueryRoute %s: no readable or writable queue", c.opts.topic)
	}
	if target != c.opts.endpoint { // the broker lives elsewhere than the access point
		conn, err := dialLoopback(target)
		if err != nil {
			return fmt.Errorf("route of %s: %w", c.opts.topic, err)
		}
		_ = c.conn.Close()
		c.conn, c.stub = conn, v2.NewMessagingServiceClient(conn)
	}
	return nil
}

func (c *v2Client) settings() *v2.Settings {
	settings := &v2.Settings{
		ClientType:     &c.clientType,
		AccessPoint:    c.accessPoint(),
		RequestTimeout: durationpb.New(requestTimeout),
		UserAgent: &v2.UA{
			Language: v2.Language_GOLANG, Version: clientVersion,
			Platform: runtime.GOOS + "/" + runtime.GOARCH, Hostname: hostName,
		},
	}
	if c.clientType == v2.ClientType_PRODUCER {
		settings.PubSub = &v2.Settings_Publishing{Publishing: &v2.Publishing{
			Topics: []*v2.Resource{c.topic()}, ValidateMessageType: true,
		}}
	} else {
		settings.PubSub = &v2.Settings_Subscription{Subscription: &v2.Subscription{
			Group: c.group(),
			Subscriptions: []*v2.SubscriptionEntry{{
				Topic: c.topic(), Expression: &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"},
			}},
			LongPollingTimeout: durationpb.New(c.opts.await),
		}}
	}
	return settings
}

// telemetry opens the client's Telemetry stream (alive until Close), sends the
// settings and waits, bounded, for the server's settings reply.
func (c *v2Client) telemetry(ctx, bg context.Context) error {
	stream, err := c.stub.Telemetry(c.sign(bg))
	if err != nil {
		return fmt.Errorf("Telemetry: %w", err)
	}
	command := &v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: c.settings()}}
	if err := stream.Send(command); err != nil {
		return fmt.Errorf("Telemetry settings: %w", err)
	}
	replied := make(chan error, 1)
	c.background.Add(1)
	go func() { // drain the stream; the first settings reply releases the caller
		defer c.background.Done()
		first := true
		for {
			reply, err := stream.Recv()
			if err != nil {
				if first {
					replied <- fmt.Errorf("Telemetry: no settings reply: %w", err)
				}
				return
			}
			if first && reply.GetSettings() != nil {
				first = false
				if reply.Status != nil && !statusOK(reply.Status) {
					replied <- statusErr("Telemetry settings", reply.Status)
				} else {
					replied <- nil
				}
			}
		}
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-replied:
		return err
	case <-timer.C:
		return errors.New("Telemetry: no settings reply within 10 s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *v2Client) heartbeat(ctx context.Context) error {
	request := &v2.HeartbeatRequest{ClientType: c.clientType}
	if c.clientType == v2.ClientType_SIMPLE_CONSUMER {
		request.Group = c.group()
	}
	cctx, cancel := context.WithTimeout(c.sign(ctx), requestTimeout)
	defer cancel()
	reply, err := c.stub.Heartbeat(cctx, request)
	if err != nil {
		return fmt.Errorf("Heartbeat: %w", err)
	}
	if !statusOK(reply.Status) {
		return statusErr("Heartbeat", reply.Status)
	}
	return nil
}

func (c *v2Client) heartbeats(bg context.Context) {
	defer c.background.Done()
	ticker := time.NewTicker(heartbeatEvery)
	defer ticker.Stop()
	for {
		select {
		case <-bg.Done():
			return
		case <-ticker.C:
			_ = c.heartbeat(bg) // as the official client, a failed heartbeat is only logged
		}
	}
}

func (c *v2Client) Send(ctx context.Context, bodies [][]byte) error {
	born := timestamppb.Now()
	messages := make([]*v2.Message, len(bodies))
	for i, body := range bodies {
		messages[i] = &v2.Message{
			Topic: c.topic(),
			Body:  body,
			SystemProperties: &v2.SystemProperties{
				MessageId:     nextMessageID(),
				BornTimestamp: born,
				BornHost:      hostName,
				BodyEncoding:  v2.Encoding_IDENTITY,
				MessageType:   v2.MessageType_NORMAL,
			},
		}
	}
	cctx, cancel := context.WithTimeout(c.sign(ctx), requestTimeout)
	defer cancel()
	reply, err := c.stub.SendMessage(cctx, &v2.SendMessageRequest{Messages: messages})
	if err != nil {
		return fmt.Errorf("SendMessage: %w", err)
	}
	if !statusOK(reply.Status) {
		return statusErr("SendMessage", reply.Status)
	}
	if n := len(reply.Entries); n != 1 && n != len(messages) {
		return fmt.Errorf("SendMessage: %d result entries for %d messages", n, len(messages))
	}
	for _, entry := range reply.Entries {
		if !statusOK(entry.Status) {
			return statusErr("SendMessage entry", entry.Status)
		}
	}
	return nil
}

func (c *v2Client) Receive(ctx context.Context, max int) ([]delivered, error) {
	queue := c.queues[int(c.next.Add(1))%len(c.queues)]
	request := &v2.ReceiveMessageRequest{
		Group:             c.group(),
		MessageQueue:      queue,
		FilterExpression:  &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "*"},
		BatchSize:         int32(max),
		InvisibleDuration: durationpb.New(c.opts.invisible),
		AutoRenew:         false,
	}
	cctx, cancel := context.WithTimeout(c.sign(ctx), c.opts.await+requestTimeout)
	defer cancel()
	stream, err := c.stub.ReceiveMessage(cctx, request)
	if err != nil {
		return nil, fmt.Errorf("ReceiveMessage: %w", err)
	}
	var out []delivered
	for {
		reply, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err() // the phase ended while this receive waited
			}
			return nil, fmt.Errorf("ReceiveMessage: %w", err)
		}
		if s := reply.GetStatus(); s != nil && !statusOK(s) && s.Code != v2.Code_MESSAGE_NOT_FOUND {
			return nil, statusErr("ReceiveMessage", s)
		}
		if m := reply.GetMessage(); m != nil {
			props := m.GetSystemProperties()
			if props.GetBodyEncoding() != v2.Encoding_IDENTITY {
				return nil, fmt.Errorf("ReceiveMessage: body encoding %s", props.GetBodyEncoding())
			}
			attempt := int(props.GetDeliveryAttempt())
			if attempt == 0 {
				attempt = 1
			}
			out = append(out, delivered{
				body:    m.Body,
				token:   &v2Handle{messageID: props.GetMessageId(), receipt: props.GetReceiptHandle()},
				attempt: attempt,
			})
		}
	}
}

func (c *v2Client) Ack(ctx context.Context, batch []delivered) error {
	entries := make([]*v2.AckMessageEntry, len(batch))
	for i, d := range batch {
		h := d.token.(*v2Handle)
		entries[i] = &v2.AckMessageEntry{MessageId: h.messageID, ReceiptHandle: h.receipt}
	}
	cctx, cancel := context.WithTimeout(c.sign(ctx), requestTimeout)
	defer cancel()
	reply, err := c.stub.AckMessage(cctx, &v2.AckMessageRequest{Group: c.group(), Topic: c.topic(), Entries: entries})
	if err != nil {
		return fmt.Errorf("AckMessage: %w", err)
	}
	if !statusOK(reply.Status) {
		return statusErr("AckMessage", reply.Status)
	}
	for _, entry := range reply.Entries {
		if !statusOK(entry.Status) {
			return statusErr("AckMessage entry", entry.Status)
		}
	}
	return nil
}

func (c *v2Client) ChangeInvisible(ctx context.Context, d *delivered, invisible time.Duration) error {
	h := d.token.(*v2Handle)
	cctx, cancel := context.WithTimeout(c.sign(ctx), requestTimeout)
	defer cancel()
	reply, err := c.stub.ChangeInvisibleDuration(cctx, &v2.ChangeInvisibleDurationRequest{
		Group: c.group(), Topic: c.topic(), ReceiptHandle: h.receipt,
		InvisibleDuration: durationpb.New(invisible), MessageId: h.messageID,
	})
	if err != nil {
		return fmt.Errorf("ChangeInvisibleDuration: %w", err)
	}
	if !statusOK(reply.Status) {
		return statusErr("ChangeInvisibleDuration", reply.Status)
	}
	if reply.ReceiptHandle == "" {
		return errors.New("ChangeInvisibleDuration: no new receipt handle")
	}
	d.token = &v2Handle{messageID: h.messageID, receipt: reply.ReceiptHandle}
	return nil
}

func (c *v2Client) Close() error {
	ctx, cancel := context.WithTimeout(c.sign(context.Background()), requestTimeout)
	defer cancel()
	request := &v2.NotifyClientTerminationRequest{}
	if c.clientType == v2.ClientType_SIMPLE_CONSUMER {
		request.Group = c.group()
	}
	_, _ = c.stub.NotifyClientTermination(ctx, request) // best effort, as the official client
	c.closeConn()
	return nil
}

func (c *v2Client) closeConn() {
	if c.stop != nil {
		c.stop()
	}
	_ = c.conn.Close()
	c.background.Wait()
}

// Message ids in the official clients' layout (34 upper-case hex digits): "01",
// 6 bytes that stand for the host (random here), the low 2 bytes of the pid,
// 4 bytes of seconds since 2021-01-01 UTC, a 4-byte per-process counter.
func messageIDPrefix() string {
	buf := make([]byte, 8)
	if _, err := rand.Read(buf[:6]); err != nil {
		panic(err)
	}
	binary.BigEndian.PutUint16(buf[6:8], uint16(os.Getpid()))
	return "01" + strings.ToUpper(hex.EncodeToString(buf))
}

var idEpoch = time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)

func nextMessageID() string {
	var tail [8]byte
	binary.BigEndian.PutUint32(tail[0:4], uint32(time.Since(idEpoch)/time.Second))
	binary.BigEndian.PutUint32(tail[4:8], idCounter.Add(1))
	return idPrefix + strings.ToUpper(hex.EncodeToString(tail[:]))
}
