package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
)

// client is what every phase drives; one implementation per system.
type client interface {
	// Send stores one batch and returns once the server has acknowledged all of it.
	Send(ctx context.Context, bodies [][]byte) error
	// Receive returns up to max messages, waiting at most about the await time when
	// there are none; an empty result is not an error.
	Receive(ctx context.Context, max int) ([]delivered, error)
	// Ack acknowledges a received batch in one round trip.
	Ack(ctx context.Context, batch []delivered) error
	Close() error
}

// invisibilityChanger is implemented by the v2 client: the redelivery phase can
// shorten a received message's invisible time, as an official-client user must
// to get below the RocketMQ proxy's 10 s minimum on receive.
type invisibilityChanger interface {
	ChangeInvisible(ctx context.Context, d *delivered, invisible time.Duration) error
}

type delivered struct {
	body    []byte
	token   any
	attempt int
}

type role int

const (
	roleProducer role = iota
	roleConsumer
)

func connect(ctx context.Context, o options, r role, name string) (client, error) {
	switch o.system {
	case "popfleet", "rocketmq":
		return dialV2(ctx, o, r, name)
	case "nats":
		return dialNats(ctx, o, name)
	case "redis":
		return dialRedis(ctx, o, name)
	}
	return nil, fmt.Errorf("unknown system %q", o.system)
}

// connectAll opens n clients concurrently (each with its own connection) and
// closes what was opened when one fails.
func connectAll(ctx context.Context, o options, r role, prefix string, n int) ([]client, error) {
	type result struct {
		i   int
		c   client
		err error
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			c, err := connect(ctx, o, r, fmt.Sprintf("%s%d", prefix, i))
			results <- result{i, c, err}
		}(i)
	}
	clients := make([]client, n)
	var first error
	for range n {
		res := <-results
		if res.err != nil && first == nil {
			first = res.err
		}
		clients[res.i] = res.c
	}
	if first != nil {
		closeAll(clients)
		return nil, first
	}
	return clients, nil
}

func closeAll(clients []client) {
	for _, c := range clients {
		if c != nil {
			_ = c.Close()
		}
	}
}

// -- message bodies: 8-byte intended send time (ns since the phase's epoch),
// 8-byte sequence number, zero padding to -body-bytes (as bench/peers/workload.py).

const headerBytes = 16

func makeBody(size int, seq int, stampNs int64) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b[0:8], uint64(stampNs))
	binary.BigEndian.PutUint64(b[8:16], uint64(seq))
	return b
}

func parseBody(b []byte) (stampNs int64, seq int, err error) {
	if len(b) < headerBytes {
		return 0, 0, fmt.Errorf("body of %d bytes, want at least %d", len(b), headerBytes)
	}
	return int64(binary.BigEndian.Uint64(b[0:8])), int(binary.BigEndian.Uint64(b[8:16])), nil
}
