package main

// The phases of the peer benchmark, the same code for every system (as
// bench/peers/workload.py for the Python generators). Clients connect (route,
// settings, streams, consumers) before the phase's clock starts.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

const (
	warmup       = 500 * time.Millisecond // latency: samples scheduled earlier are dropped
	drainCap     = 5 * time.Second        // latency: how long the consumer drains after the schedule
	spreadBatch  = 8                      // redelivery: messages per first receive
	spreadGap    = 37 * time.Millisecond  // redelivery: pause between first receives
	redeliverCap = 30 * time.Second       // redelivery: on top of the invisible time
)

func rateFigures(count int64, elapsed time.Duration, capped bool) map[string]any {
	perS := 0.0
	if elapsed > 0 {
		perS = float64(count) / elapsed.Seconds()
	}
	return map[string]any{
		"messages": count, "seconds": round(elapsed.Seconds(), 4),
		"msgs_per_s": round(perS, 1), "capped": capped,
	}
}

// sendAll sends o.count messages in batches from o.inflight lanes; stamps are
// the send time in ns since epoch. Returns the messages sent and whether the cap
// stopped it.
func sendAll(ctx context.Context, o options, c client, epoch time.Time) (int64, bool, error) {
	var next, sent atomic.Int64
	deadline := time.Now().Add(o.capTime)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var failure error
	for range o.inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				first := next.Add(int64(o.batch)) - int64(o.batch)
				if first >= int64(o.count) {
					return
				}
				n := min(int64(o.batch), int64(o.count)-first)
				stamp := time.Since(epoch).Nanoseconds()
				bodies := make([][]byte, n)
				for i := range bodies {
					bodies[i] = makeBody(o.bodyBytes, int(first)+i, stamp)
				}
				if err := c.Send(ctx, bodies); err != nil {
					once.Do(func() { failure = err; cancel() })
					return
				}
				sent.Add(n)
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		return sent.Load(), false, failure
	}
	return sent.Load(), sent.Load() < int64(o.count), nil
}

func produce(ctx context.Context, o options) (map[string]any, error) {
	c, err := connect(ctx, o, roleProducer, "producer")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	start := time.Now()
	sent, capped, err := sendAll(ctx, o, c, start)
	if err != nil {
		return nil, err
	}
	return rateFigures(sent, time.Since(start), capped), nil
}

// tally is shared by the consumers of one phase.
type tally struct {
	acked, finish, receives, empty atomic.Int64
}

// drain runs one consumer loop (receive up to a batch, ack it, count it) until
// the shared count reaches target or the context ends (the phase's cap). The
// consumer whose ack crosses the target stores the moment in t.finish.
func drain(ctx context.Context, o options, c client, target int64, t *tally, start time.Time) error {
	for t.acked.Load() < target && ctx.Err() == nil {
		got, err := c.Receive(ctx, o.batch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		t.receives.Add(1)
		if len(got) == 0 {
			t.empty.Add(1)
			continue
		}
		if err := c.Ack(ctx, got); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		after := t.acked.Add(int64(len(got)))
		if before := after - int64(len(got)); before < target && after >= target {
			t.finish.Store(int64(time.Since(start)))
		}
	}
	return nil
}

// consume drains target messages with the given clients; returns the rate figures.
func consume(ctx context.Context, o options, consumers []client, target int64, producer func(context.Context, time.Time) error) (map[string]any, error) {
	var t tally
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(o.capTime))
	defer cancel()
	errs := make(chan error, len(consumers)+1)
	var wg sync.WaitGroup
	for _, c := range consumers {
		wg.Add(1)
		go func(c client) {
			defer wg.Done()
			err := drain(ctx, o, c, target, &t, start)
			if err != nil {
				cancel()
			} else if t.acked.Load() >= target {
				cancel() // stop the others' waiting receives
			}
			errs <- err
		}(c)
	}
	if producer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := producer(ctx, start)
			if err != nil && ctx.Err() != nil {
				err = nil // stopped by the target or the cap, not a failure of its own
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	var figures map[string]any
	if f := t.finish.Load(); f > 0 {
		figures = rateFigures(target, time.Duration(f), false)
	} else {
		figures = rateFigures(t.acked.Load(), o.capTime, true)
	}
	figures["receives"] = t.receives.Load()
	figures["empty_receives"] = t.empty.Load()
	return figures, nil
}

func popAck(ctx context.Context, o options) (map[string]any, error) {
	consumers, err := connectAll(ctx, o, roleConsumer, "c", o.consumers)
	if err != nil {
		return nil, err
	}
	defer closeAll(consumers)
	figures, err := consume(ctx, o, consumers, int64(o.count), nil)
	if err != nil {
		return nil, err
	}
	figures["consumers"] = o.consumers
	return figures, nil
}

func endToEnd(ctx context.Context, o options) (map[string]any, error) {
	p, err := connect(ctx, o, roleProducer, "e2e-producer")
	if err != nil {
		return nil, err
	}
	defer p.Close()
	c, err := connect(ctx, o, roleConsumer, "e2e-consumer")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return consume(ctx, o, []client{c}, int64(o.count), func(ctx context.Context, epoch time.Time) error {
		_, _, err := sendAll(ctx, o, p, epoch)
		return err
	})
}

func round(x float64, digits int) float64 {
	scale := math.Pow(10, float64(digits))
	return math.Round(x*scale) / scale
}

// percentile is the nearest-rank percentile of sorted values (0 for none).
func percentile(sorted []float64, pct float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(pct / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func distribution(samples []float64, digits int) map[string]any {
	sorted := append([]float64(nil), samples...)
	sort.Float64s(sorted)
	out := map[string]any{"samples": len(sorted), "p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "min_ms": 0.0}
	if len(sorted) > 0 {
		out["p50_ms"] = round(percentile(sorted, 50), digits)
		out["p90_ms"] = round(percentile(sorted, 90), digits)
		out["p99_ms"] = round(percentile(sorted, 99), digits)
		out["max_ms"] = round(sorted[len(sorted)-1], digits)
		out["min_ms"] = round(sorted[0], digits)
	}
	return out
}

var errPhase = errors.New("phase failed")

func phaseError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errPhase, fmt.Sprintf(format, args...))
}
