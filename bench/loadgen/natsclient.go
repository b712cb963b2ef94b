package main

// NATS JetStream through nats.go's jetstream package, with the semantics of
// bench/peers/natsload.py:
//
//   - stream <TOPIC> on subject <topic>, file storage, limits retention;
//   - Send: one PublishAsync per message of the batch, then wait for every PubAck;
//   - Receive: a durable pull consumer named after the group (explicit acks,
//     AckWait = the invisible time, unlimited deliveries, MaxAckPending 65536);
//     FetchNoWait(max) takes what is there; when that is nothing, Fetch(1) waits
//     up to the await time for the first arrival (the next receive picks up the
//     rest), so a receive returns as soon as anything is available, as a POP
//     receive does;
//   - Ack: Ack() per message (fire-and-forget publishes), then one Flush
//     (PING/PONG), after which the server has processed them: one round trip per
//     batch, like one AckMessage or one XACK.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const maxAckPending = 65536

type natsClient struct {
	opts     options
	nc       *nats.Conn
	js       jetstream.JetStream
	consumer jetstream.Consumer
}

func streamName(topic string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToUpper(r)
		}
		return '_'
	}, topic)
}

func dialNats(ctx context.Context, o options, name string) (*natsClient, error) {
	nc, err := nats.Connect("nats://"+o.endpoint, nats.Name(name), nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &natsClient{opts: o, nc: nc, js: js}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(cctx, jetstream.StreamConfig{
		Name: streamName(o.topic), Subjects: []string{o.topic}, Storage: jetstream.FileStorage,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		nc.Close()
		return nil, fmt.Errorf("create stream: %w", err)
	}
	return c, nil
}

func (c *natsClient) pullConsumer(ctx context.Context) (jetstream.Consumer, error) {
	if c.consumer != nil {
		return c.consumer, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	consumer, err := c.js.CreateOrUpdateConsumer(cctx, streamName(c.opts.topic), jetstream.ConsumerConfig{
		Durable:       c.opts.group,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.opts.invisible,
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", c.opts.group, err)
	}
	c.consumer = consumer
	return consumer, nil
}

func (c *natsClient) Send(ctx context.Context, bodies [][]byte) error {
	futures := make([]jetstream.PubAckFuture, len(bodies))
	for i, body := range bodies {
		future, err := c.js.PublishAsync(c.opts.topic, body)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		futures[i] = future
	}
	for _, future := range futures {
		select {
		case <-future.Ok():
		case err := <-future.Err():
			return fmt.Errorf("publish ack: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c *natsClient) Receive(ctx context.Context, max int) ([]delivered, error) {
	consumer, err := c.pullConsumer(ctx)
	if err != nil {
		return nil, err
	}
	batch, err := consumer.FetchNoWait(max)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	out, err := collect(batch)
	if err != nil || len(out) > 0 {
		return out, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	batch, err = consumer.Fetch(1, jetstream.FetchMaxWait(c.opts.await))
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	return collect(batch)
}

func collect(batch jetstream.MessageBatch) ([]delivered, error) {
	var out []delivered
	for msg := range batch.Messages() {
		meta, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		out = append(out, delivered{body: msg.Data(), token: msg, attempt: int(meta.NumDelivered)})
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	return out, nil
}

func (c *natsClient) Ack(ctx context.Context, batch []delivered) error {
	for _, d := range batch {
		if err := d.token.(jetstream.Msg).Ack(); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.nc.FlushWithContext(fctx)
}

func (c *natsClient) Close() error {
	c.nc.Close()
	return nil
}
