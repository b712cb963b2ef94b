package main

// Redis Streams through go-redis, with the semantics of bench/peers/redisload.py:
//
//   - Send: a non-transactional pipeline of one XADD per message (one round trip
//     per batch); the server runs with AOF everysec;
//   - Receive: XREADGROUP GROUP <group> <consumer> COUNT max BLOCK <await> on
//     the stream (the group is created at id 0 with MKSTREAM on connect);
//   - Ack: one XACK with the batch's ids;
//   - redelivery: Redis has no invisible-time timer, so when -redis-poll-s is set
//     and the phase is redelivery, Receive first runs XAUTOCLAIM with
//     min-idle-time = the invisible time, then a non-blocking XREADGROUP, and
//     sleeps one poll interval on the client when both are empty (BLOCK timeouts
//     are resolved on Redis' 10 Hz cron). Redis' redelivery figure is therefore
//     the client's polling, which the report says next to it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const redisField = "b"

type redisClient struct {
	opts     options
	rdb      *redis.Client
	consumer string
	reclaim  bool
}

func dialRedis(ctx context.Context, o options, name string) (*redisClient, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:                     o.endpoint,
		Protocol:                 2, // as redis-py
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              5 * time.Second,
		PoolSize:                 o.inflight + 2,
	})
	c := &redisClient{opts: o, rdb: rdb, consumer: name, reclaim: o.phase == "redelivery" && o.redisPoll > 0}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis ping: %w", err)
	}
	err := rdb.XGroupCreateMkStream(ctx, o.topic, o.group, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		_ = rdb.Close()
		return nil, fmt.Errorf("XGROUP CREATE: %w", err)
	}
	return c, nil
}

func (c *redisClient) Send(ctx context.Context, bodies [][]byte) error {
	pipe := c.rdb.Pipeline()
	for _, body := range bodies {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: c.opts.topic, Values: []any{redisField, body}})
	}
	_, err := pipe.Exec(ctx)
	if err != nil {
		return fmt.Errorf("XADD pipeline: %w", err)
	}
	return nil
}

func (c *redisClient) Receive(ctx context.Context, max int) ([]delivered, error) {
	if c.reclaim {
		claimed, _, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: c.opts.topic, Group: c.opts.group, Consumer: c.consumer,
			MinIdle: c.opts.invisible, Start: "0-0", Count: int64(max),
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("XAUTOCLAIM: %w", err)
		}
		if len(claimed) > 0 {
			return entries(claimed, 2)
		}
		got, err := c.read(ctx, max, -1)
		if err != nil || len(got) > 0 {
			return got, err
		}
		select {
		case <-time.After(min(c.opts.await, c.opts.redisPoll)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, nil
	}
	return c.read(ctx, max, c.opts.await)
}

// read is XREADGROUP of new entries; block < 0 sends no BLOCK.
func (c *redisClient) read(ctx context.Context, max int, block time.Duration) ([]delivered, error) {
	streams, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: c.opts.group, Consumer: c.consumer, Streams: []string{c.opts.topic, ">"},
		Count: int64(max), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("XREADGROUP: %w", err)
	}
	var out []delivered
	for _, stream := range streams {
		got, err := entries(stream.Messages, 1)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

func entries(messages []redis.XMessage, attempt int) ([]delivered, error) {
	out := make([]delivered, 0, len(messages))
	for _, m := range messages {
		body, ok := m.Values[redisField].(string)
		if !ok {
			return nil, fmt.Errorf("entry %s without field %q", m.ID, redisField)
		}
		out = append(out, delivered{body: []byte(body), token: m.ID, attempt: attempt})
	}
	return out, nil
}

func (c *redisClient) Ack(ctx context.Context, batch []delivered) error {
	ids := make([]string, len(batch))
	for i, d := range batch {
		ids[i] = d.token.(string)
	}
	if err := c.rdb.XAck(ctx, c.opts.topic, c.opts.group, ids...).Err(); err != nil {
		return fmt.Errorf("XACK: %w", err)
	}
	return nil
}

func (c *redisClient) Close() error { return c.rdb.Close() }
